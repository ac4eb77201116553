// The operations of the self-supervised and DeiT recipes: their specs,
// safety on any image size, reproducibility, and targets moving with the
// image. Their pixels are compared with torchvision's in
// tests/python/recipe_transforms_test.py.
#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "augment/pipeline.h"
#include "gtest/gtest.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"
#include "tests/testing/test_images.h"

namespace heterodl {
namespace {

std::string Canonical(absl::string_view spec) {
  absl::StatusOr<Pipeline> pipeline = Pipeline::Parse(spec);
  EXPECT_TRUE(pipeline.ok()) << pipeline.status();
  return pipeline.ok() ? pipeline->CanonicalSpec() : "";
}

std::string ErrorOf(absl::string_view spec) {
  absl::StatusOr<Pipeline> pipeline = Pipeline::Parse(spec);
  EXPECT_FALSE(pipeline.ok()) << spec;
  return std::string(pipeline.status().message());
}

std::string Png(const cv::Mat& image) {
  std::vector<uint8_t> encoded;
  cv::imencode(".png", image, encoded);
  return std::string(encoded.begin(), encoded.end());
}

// Every operation of the recipes, each made to act (p = 1); the first six
// draw nothing else.
constexpr int kDeterministicOperations = 6;
const char* const kRecipeOperations[] = {
    "solarize(128,p=1)",
    "posterize(2,p=1)",
    "equalize(p=1)",
    "autocontrast(p=1)",
    "adjust_sharpness(3,p=1)",
    "adjust_sharpness(0,p=1)",
    "affine(degrees=30,translate=0.2:0.1,scale=0.7:1.3,shear=20,fill=128)",
    "random_erasing(p=1)",
    "random_erasing(p=1,scale=0.5:0.9,value=random)",
    "color_jitter(0.4,0.4,0.2,0.1,p=0.8)",
    "gaussian_blur(23,p=0.5)",
    "rand_augment(num_ops=4)",
    "rand_augment(num_ops=2,magnitude=30)",
    "trivial_augment_wide()",
};

TEST(RecipeOperationsTest, SpecsTakeTorchvisionsNamesAndDefaults) {
  EXPECT_EQ(Canonical("center_crop(8)|solarize(200)"),
            "decode(fast)|center_crop(8)|solarize(200,p=0.5)");
  EXPECT_EQ(Canonical("center_crop(8)|posterize(bits=4,p=0.2)"),
            "decode(fast)|center_crop(8)|posterize(4,p=0.2)");
  EXPECT_EQ(Canonical("center_crop(8)|equalize()|autocontrast(1)"),
            "decode(fast)|center_crop(8)|equalize(p=0.5)|autocontrast(p=1)");
  EXPECT_EQ(Canonical("center_crop(8)|adjust_sharpness(2)"),
            "decode(fast)|center_crop(8)|adjust_sharpness(2,p=0.5)");
  EXPECT_EQ(Canonical("center_crop(8)|affine(10)"),
            "decode(fast)|center_crop(8)|affine(degrees=-10:10,fill=0)");
  EXPECT_EQ(Canonical("center_crop(8)|affine(0,translate=0.1,scale=0.9:1.1,shear=-5:15,fill=3)"),
            "decode(fast)|center_crop(8)|affine(degrees=-0:0,translate=0.1:0.1,scale=0.9:1.1,"
            "shear=-5:15,fill=3)");
  EXPECT_EQ(Canonical("center_crop(8)|random_erasing()"),
            "decode(fast)|center_crop(8)|random_erasing(p=0.5,scale=0.02:0.33,ratio=0.3:3.3,"
            "value=0)");
  EXPECT_EQ(Canonical("center_crop(8)|random_erasing(0.25,value=random)"),
            "decode(fast)|center_crop(8)|random_erasing(p=0.25,scale=0.02:0.33,ratio=0.3:3.3,"
            "value=random)");
  EXPECT_EQ(Canonical("center_crop(8)|rand_augment()"),
            "decode(fast)|center_crop(8)|rand_augment(num_ops=2,magnitude=9,num_magnitude_bins=31,"
            "fill=0)");
  EXPECT_EQ(Canonical("center_crop(8)|trivial_augment_wide()"),
            "decode(fast)|center_crop(8)|trivial_augment_wide(num_magnitude_bins=31,fill=0)");
  // RandomApply's p on color_jitter and gaussian_blur; at 1 it is not written.
  EXPECT_EQ(Canonical("center_crop(8)|color_jitter(0.4,0.4,0.2,0.1,p=0.8)|gaussian_blur(23,p=1)"),
            "decode(fast)|center_crop(8)|color_jitter(0.4,0.4,0.2,0.1,p=0.8)|"
            "gaussian_blur(23,sigma=0.1:2)");
}

TEST(RecipeOperationsTest, BadParametersAreRefusedWithTheirReason) {
  EXPECT_NE(ErrorOf("center_crop(8)|solarize()").find("needs 'threshold'"), std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(8)|solarize(300)").find("[0, 255]"), std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(8)|posterize(9)").find("[0, 8]"), std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(8)|adjust_sharpness()").find("needs 'sharpness_factor'"),
            std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(8)|affine(scale=1:2)").find("needs 'degrees'"), std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(8)|affine(0,shear=90)").find("[-80, 80]"), std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(8)|affine(0,translate=2)").find("[0, 1]"), std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(8)|random_erasing(value=noise)").find("or random"),
            std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(8)|random_erasing(scale=0.5:2)").find("(0, 1]"),
            std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(8)|rand_augment(magnitude=31)").find("[0, 30]"),
            std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(8)|rand_augment(num_magnitude_bins=1)").find("at least 2"),
            std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(8)|rand_augment(num_ops=17)").find("[0, 16]"), std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(8)|color_jitter(0.4,p=2)").find("probability"), std::string::npos);
}

TEST(RecipeOperationsTest, EveryOperationIsSafeOnAnyImageSize) {
  const cv::Size sizes[] = {{1, 1}, {2, 2}, {3, 1}, {1, 300}, {300, 2}, {5, 3}, {64, 48}};
  for (const char* operation : kRecipeOperations) {
    const std::string spec = absl::StrCat(operation, "|center_crop(16x12)");
    absl::StatusOr<Pipeline> pipeline = Pipeline::Parse(spec);
    ASSERT_TRUE(pipeline.ok()) << spec << ": " << pipeline.status();
    std::vector<uint8_t> out(pipeline->output_bytes());
    for (const cv::Size size : sizes) {
      cv::Mat image(size, CV_8UC3);
      cv::randu(image, 0, 256);
      for (uint64_t index = 0; index < 8; ++index) {
        const absl::Status status = pipeline->Run(Png(image), {3, 1, index}, out.data());
        EXPECT_TRUE(status.ok()) << spec << " on " << size << ": " << status;
      }
    }
  }
}

TEST(RecipeOperationsTest, EveryOperationIsReproducibleAndRandomWhereItDraws) {
  const std::string jpeg = testing::MakeJpeg(96, 80, 3);
  for (int i = 0; i < static_cast<int>(std::size(kRecipeOperations)); ++i) {
    const std::string spec = absl::StrCat("center_crop(64)|", kRecipeOperations[i]);
    absl::StatusOr<Pipeline> pipeline = Pipeline::Parse(spec);
    ASSERT_TRUE(pipeline.ok()) << pipeline.status();
    std::vector<std::vector<uint8_t>> outputs;
    for (uint64_t index = 0; index < 12; ++index) {
      std::vector<uint8_t> first(pipeline->output_bytes());
      std::vector<uint8_t> again(pipeline->output_bytes());
      ASSERT_TRUE(pipeline->Run(jpeg, {9, 2, index}, first.data()).ok());
      ASSERT_TRUE(pipeline->Run(jpeg, {9, 2, index}, again.data()).ok());
      EXPECT_EQ(first, again) << spec;
      outputs.push_back(std::move(first));
    }
    if (i < kDeterministicOperations) {
      continue;
    }
    std::sort(outputs.begin(), outputs.end());
    const auto distinct = std::unique(outputs.begin(), outputs.end()) - outputs.begin();
    EXPECT_GT(distinct, 1) << spec << ": the same output for every key";
  }
}

TEST(RecipeOperationsTest, AffineMovesTheMaskExactlyAsTheImage) {
  // The image's red channel is the mask's ids: after any affine warp (fill
  // 255, the ignore index) the two still agree pixel for pixel.
  cv::Mat ids(37, 53, CV_8UC1);
  cv::randu(ids, 0, 200);
  cv::Mat image;
  cv::merge(std::vector<cv::Mat>{ids, ids, ids}, image);  // PNG's BGR: red = ids
  for (const char* operation :
       {"affine(degrees=40,translate=0.3:0.2,scale=0.6:1.4,shear=25,fill=255)",
        "affine(degrees=0,shear=-30:30,fill=255)", "rotation(33)|affine(5,fill=255)"}) {
    absl::StatusOr<Pipeline> pipeline =
        Pipeline::Parse(absl::StrCat(operation, "|center_crop(37x53)"));
    ASSERT_TRUE(pipeline.ok()) << pipeline.status();
    // A draw near the middle of a symmetric range moves nothing.
    int moved_samples = 0;
    for (uint64_t index = 0; index < 6; ++index) {
      std::vector<uint8_t> pixels(pipeline->output_bytes());
      std::vector<uint8_t> moved(static_cast<size_t>(37) * 53);
      SegmentationMask mask;
      mask.ids = ids.data;
      mask.width = ids.cols;
      mask.height = ids.rows;
      mask.ignore_index = 255;
      mask.out = moved.data();
      ASSERT_TRUE(
          pipeline->Run(Png(image), {1, 0, index}, pixels.data(), nullptr, nullptr, &mask).ok());
      int unmoved = 0;
      for (size_t i = 0; i < moved.size(); ++i) {
        // rotation() fills the image with 0 and the mask with the index.
        if (moved[i] == 255 && pixels[3 * i] == 0) {
          continue;
        }
        ASSERT_EQ(moved[i], pixels[3 * i]) << operation << " at " << i;
        unmoved += moved[i] == ids.data[i] ? 1 : 0;
      }
      moved_samples += unmoved < static_cast<int>(moved.size()) / 2 ? 1 : 0;
    }
    EXPECT_GE(moved_samples, 3) << operation << ": nothing moved";
  }
}

}  // namespace
}  // namespace heterodl
