// Rectangular sizes and the segmentation recipe's operations (random_crop,
// random_resize, scale_jitter), with torchvision v2's semantics. Compared
// with torchvision itself in tests/python/transforms_test.py.
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "augment/pipeline.h"
#include "augment/transforms.h"
#include "gtest/gtest.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"
#include "opencv2/imgproc.hpp"

namespace heterodl {
namespace {

// An image whose every pixel says where it is: (x, y, x ^ y) mod 256.
cv::Mat Coordinates(int width, int height) {
  cv::Mat image(height, width, CV_8UC3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      image.at<cv::Vec3b>(y, x) = {static_cast<uint8_t>(x), static_cast<uint8_t>(y),
                                   static_cast<uint8_t>(x ^ y)};
    }
  }
  return image;
}

std::string Png(const cv::Mat& rgb) {
  cv::Mat bgr;
  cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
  std::vector<uint8_t> bytes;
  cv::imencode(".png", bgr, bytes);
  return {bytes.begin(), bytes.end()};
}

// Runs `spec` on `image` (losslessly encoded) for sample `index`.
cv::Mat RunOn(const std::string& spec, const cv::Mat& image, uint64_t index = 0) {
  absl::StatusOr<Pipeline> pipeline = Pipeline::Parse(spec);
  EXPECT_TRUE(pipeline.ok()) << pipeline.status();
  cv::Mat out(pipeline->output_height(), pipeline->output_width(), CV_8UC3);
  const absl::Status run = pipeline->Run(Png(image), {7, 0, index}, out.data);
  EXPECT_TRUE(run.ok()) << spec << ": " << run;
  return out;
}

bool Same(const cv::Mat& a, const cv::Mat& b) {
  return a.size() == b.size() && cv::norm(a, b, cv::NORM_INF) == 0;
}

TEST(GeometryTest, SizesAreSquareOrHeightByWidth) {
  for (const auto& [spec, height, width] : std::vector<std::tuple<std::string, int, int>>{
           {"random_resized_crop(512x1024)", 512, 1024},
           {"resize(24x40)", 24, 40},
           {"center_crop(20x30)", 20, 30},
           {"resize(256)|center_crop(224)", 224, 224},
           {"random_crop(64x32,pad_if_needed=true)", 64, 32},
           {"random_resize(256,1024)|random_crop(512x1024,pad_if_needed=1)", 512, 1024},
           {"scale_jitter(1024x2048)|center_crop(32)", 32, 32},
       }) {
    absl::StatusOr<Pipeline> pipeline = Pipeline::Parse(spec);
    ASSERT_TRUE(pipeline.ok()) << spec << ": " << pipeline.status();
    EXPECT_EQ(pipeline->output_height(), height) << spec;
    EXPECT_EQ(pipeline->output_width(), width) << spec;
    // The canonical form parses to the same.
    absl::StatusOr<Pipeline> again = Pipeline::Parse(pipeline->CanonicalSpec());
    ASSERT_TRUE(again.ok()) << pipeline->CanonicalSpec() << ": " << again.status();
    EXPECT_EQ(again->CanonicalSpec(), pipeline->CanonicalSpec());
  }
  EXPECT_EQ(Pipeline::Parse("random_resized_crop(512x1024)")->CanonicalSpec(),
            "decode(fast)|random_resized_crop(512x1024,scale=0.08:1,ratio=0.75:1.33333)");
  EXPECT_EQ(Pipeline::Parse("random_crop(8,padding=4)")->CanonicalSpec(),
            "decode(fast)|random_crop(8,padding=4,pad_if_needed=0,fill=0)");
}

TEST(GeometryTest, BadSizesAndParametersSayWhy) {
  const auto error = [](const std::string& spec) {
    absl::StatusOr<Pipeline> pipeline = Pipeline::Parse(spec);
    EXPECT_FALSE(pipeline.ok()) << spec;
    return std::string(pipeline.status().message());
  };
  EXPECT_NE(error("center_crop(0x5)").find("'size' must be an integer in [1, 8192], or HxW"),
            std::string::npos);
  EXPECT_NE(error("center_crop(5x9000)").find("or HxW"), std::string::npos);
  EXPECT_NE(error("gaussian_blur(3x3)|center_crop(4)").find("'kernel_size' must be an integer"),
            std::string::npos);
  EXPECT_NE(error("random_resize(300,200)|center_crop(4)").find("'max_size' must be more"),
            std::string::npos);
  EXPECT_NE(error("random_crop(8,pad_if_needed=maybe)").find("must be true or false"),
            std::string::npos);
  EXPECT_NE(error("random_crop(8,fill=300)").find("'fill' must be an integer in [0, 255]"),
            std::string::npos);
  EXPECT_NE(error("random_resize(100,200)").find("fixed output size"), std::string::npos);
  EXPECT_NE(error("scale_jitter(64,scale_range=0.5)|center_crop(8)").find("lo:hi"),
            std::string::npos);
}

TEST(GeometryTest, CenterCropOfHeightByWidthIsTheMiddleWindow) {
  const cv::Mat image = Coordinates(50, 40);
  // torchvision: top = round((40 - 20) / 2) = 10, left = round((50 - 30) / 2) = 10.
  EXPECT_TRUE(Same(RunOn("center_crop(20x30)", image), image(cv::Rect(10, 10, 30, 20))));
  // (75 - 50) / 2 = 12.5: torchvision's Python round() makes it 12.
  const cv::Mat wide = Coordinates(75, 50);
  EXPECT_TRUE(Same(RunOn("center_crop(40x50)", wide), wide(cv::Rect(12, 5, 50, 40))));
  // Larger than the image: zero-padded around it.
  const cv::Mat padded = RunOn("center_crop(44x50)", image);
  EXPECT_TRUE(Same(padded(cv::Rect(0, 2, 50, 40)), image));
  EXPECT_EQ(cv::countNonZero(padded.row(0).reshape(1)), 0);
}

TEST(GeometryTest, RandomCropWindowsCoverEveryOffsetOfThePaddedImage) {
  const cv::Mat image = Coordinates(30, 20);
  // pad_if_needed: height 20 < 26, so 6 rows of zeros above and below (as
  // torchvision pads the difference on both ends: 32 rows), then a window at
  // a top in [0, 6]; the width fits, left in [0, 6].
  cv::Mat padded;
  cv::copyMakeBorder(image, padded, 6, 6, 0, 0, cv::BORDER_CONSTANT, cv::Scalar::all(0));
  std::set<std::pair<int, int>> offsets;
  for (uint64_t index = 0; index < 400; ++index) {
    const cv::Mat crop = RunOn("random_crop(26x24,pad_if_needed=true)", image, index);
    bool found = false;
    for (int top = 0; top <= 6 && !found; ++top) {
      for (int left = 0; left <= 6 && !found; ++left) {
        if (Same(crop, padded(cv::Rect(left, top, 24, 26)))) {
          offsets.insert({top, left});
          found = true;
        }
      }
    }
    ASSERT_TRUE(found) << "sample " << index << " is no window of the padded image";
  }
  EXPECT_EQ(offsets.size(), 7u * 7u);  // every one of them
  // `padding` first, filled with `fill`, then the crop.
  const cv::Mat filled = RunOn("random_crop(30x40,padding=5,fill=9)", image, 3);
  EXPECT_EQ(filled.at<cv::Vec3b>(0, 0), cv::Vec3b(9, 9, 9));
}

TEST(GeometryTest, RandomResizeDrawsTheShorterSideBelowMaxSize) {
  const std::unique_ptr<Transform> resize = MakeRandomResize(10, 14);
  std::set<int> sides;
  for (uint32_t index = 0; index < 200; ++index) {
    cv::Mat image = Coordinates(60, 30);
    CounterRng rng(1, {0, 0, index});
    resize->Apply(image, rng);
    sides.insert(image.rows);
    EXPECT_EQ(image.cols, 2 * image.rows);  // 60 x s / 30, truncated
  }
  EXPECT_EQ(sides, (std::set<int>{10, 11, 12, 13}));  // max_size excluded
  EXPECT_EQ(resize->OutputSize({60, 30}), cv::Size(26, 13));
}

TEST(GeometryTest, ScaleJitterFitsTheTargetTimesAFactor) {
  // target_size 100x200 (H x W) on a 400 x 100 image: r = min(200 / 400,
  // 100 / 100) x scale = 0.5 x scale.
  const std::unique_ptr<Transform> jitter = MakeScaleJitter({200, 100}, {0.5, 2.0});
  for (uint32_t index = 0; index < 100; ++index) {
    cv::Mat image = Coordinates(400, 100);
    CounterRng rng(3, {0, 0, index});
    CounterRng same(3, {0, 0, index});
    const double scale = same.Uniform(0.5, 2.0);
    jitter->Apply(image, rng);
    EXPECT_EQ(image.cols, static_cast<int>(400 * 0.5 * scale)) << scale;
    EXPECT_EQ(image.rows, static_cast<int>(100 * 0.5 * scale)) << scale;
  }
  EXPECT_EQ(jitter->OutputSize({400, 100}), cv::Size(400, 100));
}

TEST(GeometryTest, AnExactResizeIgnoresTheAspectRatio) {
  const cv::Mat out = RunOn("resize(10x40)", Coordinates(20, 20));
  EXPECT_EQ(out.size(), cv::Size(40, 10));
  // Bilinear upsampling along x keeps the first column's x near 0.
  EXPECT_LE(out.at<cv::Vec3b>(0, 0)[0], 1);
}

}  // namespace
}  // namespace heterodl
