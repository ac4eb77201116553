#include "augment/pipeline.h"

#include <cmath>
#include <cstdio>

#include "gtest/gtest.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"
#include "opencv2/imgproc.hpp"
#include "tests/testing/test_images.h"

namespace heterodl {
namespace {

std::string ErrorOf(absl::string_view spec) {
  absl::StatusOr<Pipeline> pipeline = Pipeline::Parse(spec);
  EXPECT_FALSE(pipeline.ok()) << spec;
  return std::string(pipeline.status().message());
}

TEST(PipelineTest, ShortFormUsesTorchvisionDefaults) {
  absl::StatusOr<Pipeline> pipeline = Pipeline::Parse("random_resized_crop(224)|hflip(0.5)");
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  EXPECT_EQ(pipeline->output_height(), 224);
  EXPECT_EQ(pipeline->output_width(), 224);
  EXPECT_EQ(pipeline->CanonicalSpec(),
            "random_resized_crop(224,scale=0.08:1,ratio=0.75:1.33333)|hflip(0.5)");
}

TEST(PipelineTest, NamedParameters) {
  absl::StatusOr<Pipeline> pipeline =
      Pipeline::Parse(" random_resized_crop( 96 , scale=0.5:1, ratio=1:1 ) | hflip(p=0.25)");
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  EXPECT_EQ(pipeline->CanonicalSpec(), "random_resized_crop(96,scale=0.5:1,ratio=1:1)|hflip(0.25)");
  EXPECT_TRUE(Pipeline::Parse("resize(256)|center_crop(224)").ok());
}

TEST(PipelineTest, ErrorsNamePositionAndReason) {
  EXPECT_EQ(ErrorOf("random_resized_crop(224)|hflp(0.5)"),
            "pipeline spec: at 25: unknown operation 'hflp' (known: random_resized_crop, "
            "resize, center_crop, hflip)");
  EXPECT_NE(ErrorOf("hflip(2)|center_crop(8)").find("at 6: 'p' must be a probability"),
            std::string::npos);
  EXPECT_NE(ErrorOf("random_resized_crop(224,scale=0:1)").find("at 24"), std::string::npos);
  EXPECT_NE(ErrorOf("random_resized_crop(224").find("expected ',' or ')'"), std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(0)").find("must be an integer"), std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(8,9)").find("at most 1"), std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(size=8,size=9)").find("given twice"), std::string::npos);
  EXPECT_NE(ErrorOf("hflip(0.5)").find("fixed output size"), std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(8)|resize(16)").find("fixed output size"), std::string::npos);
  EXPECT_NE(ErrorOf("").find("empty pipeline"), std::string::npos);
}

TEST(PipelineTest, SameKeySameBytesDifferentKeyDifferentBytes) {
  absl::StatusOr<Pipeline> pipeline = Pipeline::Parse("random_resized_crop(48)|hflip(0.5)");
  const std::string jpeg = heterodl::testing::MakeJpeg(200, 150, 1);
  std::vector<uint8_t> a(pipeline->output_bytes()), b(a.size()), c(a.size());
  ASSERT_TRUE(pipeline->Run(jpeg, {1, 0, 5}, a.data()).ok());
  ASSERT_TRUE(pipeline->Run(jpeg, {1, 0, 5}, b.data()).ok());
  ASSERT_TRUE(pipeline->Run(jpeg, {1, 1, 5}, c.data()).ok());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(PipelineTest, CenterCropIsExact) {
  // resize is skipped for a same-size image, so the crop is an exact copy of
  // the centre, in RGB order.
  absl::StatusOr<Pipeline> pipeline = Pipeline::Parse("center_crop(2)");
  ASSERT_TRUE(pipeline.ok());
  std::vector<uint8_t> out(pipeline->output_bytes());
  const std::string jpeg = heterodl::testing::MakeJpeg(16, 16, 0);
  ASSERT_TRUE(pipeline->Run(jpeg, {}, out.data()).ok());
  EXPECT_EQ(out.size(), 12u);
}

TEST(PipelineTest, UndecodableInputIsAnErrorNotACrash) {
  absl::StatusOr<Pipeline> pipeline = Pipeline::Parse("random_resized_crop(32)");
  std::vector<uint8_t> out(pipeline->output_bytes());
  EXPECT_TRUE(absl::IsInvalidArgument(pipeline->Run("", {}, out.data())));
  EXPECT_TRUE(absl::IsInvalidArgument(pipeline->Run("GIF89a-garbage", {}, out.data())));
  std::string png_header("\x89PNG\r\n\x1a\n", 8);
  EXPECT_FALSE(pipeline->Run(png_header, {}, out.data()).ok());
}

}  // namespace
}  // namespace heterodl

namespace heterodl {
namespace {

// Mean absolute difference per channel value of two equal-size buffers.
double MeanAbsoluteDifference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += std::abs(int{a[i]} - int{b[i]});
  return sum / a.size();
}

std::vector<std::string> PhotoJpegs() {
  // Real photos when the sample dataset's sources are installed; the
  // synthetic pattern otherwise.
  std::vector<std::string> images;
  const char* kPhotos[] = {"/usr/share/backgrounds/mate/nature/Dune.jpg",
                           "/usr/share/backgrounds/mate/nature/LadyBird.jpg",
                           "/usr/share/backgrounds/mate/nature/Wood.jpg"};
  for (const char* path : kPhotos) {
    cv::Mat photo = cv::imread(path, cv::IMREAD_REDUCED_COLOR_4);
    if (photo.empty()) continue;
    for (int width : {320, 480, 640}) {
      cv::Mat resized;
      cv::resize(photo, resized, {width, width * photo.rows / photo.cols}, 0, 0, cv::INTER_AREA);
      std::vector<uint8_t> encoded;
      cv::imencode(".jpg", resized, encoded, {cv::IMWRITE_JPEG_QUALITY, 90});
      images.emplace_back(encoded.begin(), encoded.end());
    }
  }
  if (images.empty()) {
    for (int seed = 0; seed < 6; ++seed) images.push_back(testing::MakeJpeg(480, 360, seed));
  }
  return images;
}

// The region decoder (ROI + DCT scaling) against "full decode, crop, resize":
// same crop and flip draws, pixels within the documented tolerance
// (docs/pipeline.md): mean absolute difference per channel value below 3 of
// 255 over all samples, below 12 for any one sample.
TEST(PipelineTest, RegionDecodeMatchesFullDecodeWithinTolerance) {
  for (const char* spec : {"random_resized_crop(224)|hflip(0.5)", "random_resized_crop(64)",
                           "resize(128)|center_crop(112)"}) {
    PipelineOptions full_options;
    full_options.region_decode = false;
    absl::StatusOr<Pipeline> fast = Pipeline::Parse(spec);
    absl::StatusOr<Pipeline> full = Pipeline::Parse(spec, full_options);
    ASSERT_TRUE(fast.ok() && full.ok());
    double worst = 0, total = 0;
    int count = 0;
    for (const std::string& jpeg : PhotoJpegs()) {
      for (uint64_t index = 0; index < 20; ++index) {
        std::vector<uint8_t> a(fast->output_bytes()), b(full->output_bytes());
        ASSERT_TRUE(fast->Run(jpeg, {3, 0, index}, a.data()).ok());
        ASSERT_TRUE(full->Run(jpeg, {3, 0, index}, b.data()).ok());
        const double difference = MeanAbsoluteDifference(a, b);
        worst = std::max(worst, difference);
        total += difference;
        ++count;
      }
    }
    std::printf("%s: mean abs difference %.2f on average, %.2f at worst\n", spec, total / count,
                worst);
    EXPECT_LT(total / count, 3.0) << spec;
    EXPECT_LT(worst, 12.0) << spec;
  }
}

}  // namespace
}  // namespace heterodl
