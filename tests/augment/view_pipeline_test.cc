// Multi-view pipelines: several views of each sample, decoded once.
#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "augment/pipeline.h"
#include "gtest/gtest.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"
#include "tests/testing/test_images.h"

namespace heterodl {
namespace {

constexpr char kDinoViews[] =
    "2*random_resized_crop(64,scale=0.4:1)|hflip(0.5)|color_jitter(0.4,0.4,0.2,0.1,p=0.8)|"
    "grayscale(0.2)|gaussian_blur(23,p=1.0);"
    "8*random_resized_crop(32,scale=0.05:0.4)|hflip(0.5)|solarize(128,p=0.2)";

std::string Png(const cv::Mat& image) {
  std::vector<uint8_t> encoded;
  cv::imencode(".png", image, encoded);
  return std::string(encoded.begin(), encoded.end());
}

cv::Mat Noise(int width, int height) {
  cv::Mat image(height, width, CV_8UC3);
  cv::randu(image, 0, 256);
  return image;
}

// Every view of a sample, one byte vector each, in spec order.
std::vector<std::vector<uint8_t>> Views(const Pipeline& pipeline, const std::string& image,
                                        const SampleKey& key) {
  std::vector<uint8_t> out(pipeline.output_bytes());
  const absl::Status status = pipeline.Run(image, key, out.data());
  EXPECT_TRUE(status.ok()) << status;
  std::vector<std::vector<uint8_t>> views;
  size_t offset = 0;
  for (const ViewGroupShape& group : pipeline.view_groups()) {
    for (int k = 0; k < group.count; ++k) {
      views.emplace_back(out.begin() + static_cast<std::ptrdiff_t>(offset),
                         out.begin() + static_cast<std::ptrdiff_t>(offset + group.view_bytes()));
      offset += group.view_bytes();
    }
  }
  return views;
}

TEST(ViewPipelineTest, GroupsOfViewsAreParsedAndWrittenOut) {
  absl::StatusOr<Pipeline> pipeline = Pipeline::Parse(kDinoViews);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  ASSERT_TRUE(pipeline->multi_view());
  ASSERT_EQ(pipeline->view_groups().size(), 2u);
  EXPECT_EQ(pipeline->view_groups()[0].count, 2);
  EXPECT_EQ(pipeline->view_groups()[0].height, 64);
  EXPECT_EQ(pipeline->view_groups()[1].count, 8);
  EXPECT_EQ(pipeline->view_groups()[1].width, 32);
  EXPECT_EQ(pipeline->output_bytes(), 2u * 64 * 64 * 3 + 8u * 32 * 32 * 3);
  EXPECT_EQ(pipeline->CanonicalSpec().substr(0, 47),
            "2*decode(fast)|random_resized_crop(64,scale=0.4");
  EXPECT_NE(pipeline->CanonicalSpec().find(";8*decode(fast)|random_resized_crop(32"),
            std::string::npos);
  // The canonical form parses to itself.
  absl::StatusOr<Pipeline> again = Pipeline::Parse(pipeline->CanonicalSpec());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->CanonicalSpec(), pipeline->CanonicalSpec());
  // One group of one view is a plain pipeline.
  absl::StatusOr<Pipeline> single = Pipeline::Parse("1*center_crop(8)");
  ASSERT_TRUE(single.ok());
  EXPECT_FALSE(single->multi_view());
  EXPECT_EQ(single->CanonicalSpec(), "decode(fast)|center_crop(8)");
}

TEST(ViewPipelineTest, BadGroupsAreRefusedWithTheirReason) {
  const auto error_of = [](absl::string_view spec) {
    absl::StatusOr<Pipeline> pipeline = Pipeline::Parse(spec);
    EXPECT_FALSE(pipeline.ok()) << spec;
    return std::string(pipeline.status().message());
  };
  EXPECT_NE(error_of("0*center_crop(8)").find("[1, 64]"), std::string::npos);
  EXPECT_NE(error_of("two*center_crop(8)").find("'two*'"), std::string::npos);
  EXPECT_NE(error_of("40*center_crop(8);30*center_crop(4)").find("70 views"), std::string::npos);
  EXPECT_NE(error_of("2*center_crop(8);2*hflip(0.5)").find("view group 2: pipeline spec:"),
            std::string::npos);
  EXPECT_NE(error_of("2*center_crop(8);").find("view group 2"), std::string::npos);
}

TEST(ViewPipelineTest, ViewsAreDistinctReproducibleAndKeyedBySample) {
  absl::StatusOr<Pipeline> pipeline = Pipeline::Parse(kDinoViews);
  ASSERT_TRUE(pipeline.ok());
  const std::string jpeg = testing::MakeJpeg(320, 240, 4);
  const std::vector<std::vector<uint8_t>> views = Views(*pipeline, jpeg, {5, 1, 9});
  ASSERT_EQ(views.size(), 10u);
  std::vector<std::vector<uint8_t>> sorted = views;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end()) << "two views alike";
  EXPECT_EQ(Views(*pipeline, jpeg, {5, 1, 9}), views);
  EXPECT_NE(Views(*pipeline, jpeg, {5, 2, 9}), views);
  EXPECT_NE(Views(*pipeline, jpeg, {5, 1, 10}), views);
  EXPECT_NE(Views(*pipeline, jpeg, {6, 1, 9}), views);
  // RunViews writes each group where it is told, the same bytes.
  std::vector<uint8_t> globals(pipeline->view_groups()[0].bytes());
  std::vector<uint8_t> locals(pipeline->view_groups()[1].bytes());
  ASSERT_TRUE(pipeline->RunViews(jpeg, {5, 1, 9}, {globals.data(), locals.data()}).ok());
  const auto global_bytes = static_cast<std::ptrdiff_t>(views[0].size());
  const auto local_bytes = static_cast<std::ptrdiff_t>(views[9].size());
  EXPECT_TRUE(std::equal(globals.begin(), globals.begin() + global_bytes, views[0].begin()));
  EXPECT_TRUE(std::equal(locals.end() - local_bytes, locals.end(), views[9].begin()));
}

TEST(ViewPipelineTest, ADecodeSharedByTheViewsGivesWhatEachViewAloneGives) {
  // Deterministic views of a PNG (decoded at full scale either way): each
  // view is the single-view pipeline's output, bit for bit, although the
  // image was decoded once for all of them.
  const std::string png = Png(Noise(96, 80));
  const char* const specs[] = {"resize(64x64)|center_crop(32)", "center_crop(16)",
                               "resize(40)|center_crop(24x20)"};
  absl::StatusOr<Pipeline> views =
      Pipeline::Parse(absl::StrCat("2*", specs[0], ";1*", specs[1], ";3*", specs[2]));
  ASSERT_TRUE(views.ok()) << views.status();
  const std::vector<std::vector<uint8_t>> outputs = Views(*views, png, {1, 0, 0});
  const int group_of_view[] = {0, 0, 1, 2, 2, 2};
  for (size_t v = 0; v < outputs.size(); ++v) {
    absl::StatusOr<Pipeline> alone = Pipeline::Parse(specs[group_of_view[v]]);
    ASSERT_TRUE(alone.ok());
    std::vector<uint8_t> out(alone->output_bytes());
    ASSERT_TRUE(alone->Run(png, {1, 0, 0}, out.data()).ok());
    EXPECT_EQ(outputs[v], out) << "view " << v;
  }
}

TEST(ViewPipelineTest, ViewsOfAnyImageSizeAndOfUndecodableDataAreSafe) {
  absl::StatusOr<Pipeline> pipeline = Pipeline::Parse(kDinoViews);
  ASSERT_TRUE(pipeline.ok());
  std::vector<uint8_t> out(pipeline->output_bytes());
  for (const cv::Size size : {cv::Size(1, 1), cv::Size(2, 3), cv::Size(1, 400), cv::Size(500, 2)}) {
    EXPECT_TRUE(pipeline->Run(Png(Noise(size.width, size.height)), {1, 0, 3}, out.data()).ok())
        << size;
  }
  EXPECT_FALSE(pipeline->Run("not an image", {1, 0, 3}, out.data()).ok());
  const std::string jpeg = testing::MakeJpeg(200, 100, 1);
  EXPECT_FALSE(pipeline->Run(jpeg.substr(0, 40), {1, 0, 3}, out.data()).ok());
  std::atomic<bool> abandoned{true};
  EXPECT_TRUE(absl::IsCancelled(pipeline->Run(jpeg, {1, 0, 3}, out.data(), nullptr, &abandoned)));
  // Views take images alone.
  SampleBoxes boxes;
  EXPECT_FALSE(pipeline->Run(jpeg, {1, 0, 3}, out.data(), nullptr, nullptr, nullptr, &boxes).ok());
}

TEST(ViewPipelineTest, TheCostCountsEveryViewAndOneDecode) {
  absl::StatusOr<Pipeline> one = Pipeline::Parse("random_resized_crop(96)|gaussian_blur(23)");
  absl::StatusOr<Pipeline> eight = Pipeline::Parse("8*random_resized_crop(96)|gaussian_blur(23)");
  ASSERT_TRUE(one.ok() && eight.ok());
  const double decode =
      kCostReferenceWidth * kCostReferenceHeight + kOperationOverheadPixelOperations;
  EXPECT_NEAR(eight->EstimateCost().pixel_operations - decode,
              8 * (one->EstimateCost().pixel_operations - decode), 1);
}

}  // namespace
}  // namespace heterodl
