#include "augment/pipeline.h"

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <thread>

#include "augment/decode.h"
#include "augment/jpeg_decoder.h"
#include "gtest/gtest.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"
#include "opencv2/imgproc.hpp"
#include "tests/testing/status_testing.h"
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
            "decode(fast)|random_resized_crop(224,scale=0.08:1,ratio=0.75:1.33333)|hflip(0.5)");
}

TEST(PipelineTest, NamedParameters) {
  absl::StatusOr<Pipeline> pipeline =
      Pipeline::Parse(" random_resized_crop( 96 , scale=0.5:1, ratio=1:1 ) | hflip(p=0.25)");
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  EXPECT_EQ(pipeline->CanonicalSpec(),
            "decode(fast)|random_resized_crop(96,scale=0.5:1,ratio=1:1)|hflip(0.25)");
  absl::StatusOr<Pipeline> exact = Pipeline::Parse("decode(exact)|center_crop(8)");
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_EQ(exact->CanonicalSpec(), "decode(exact)|center_crop(8)");
  EXPECT_TRUE(Pipeline::Parse("resize(256)|center_crop(224)").ok());
}

TEST(PipelineTest, ErrorsNamePositionAndReason) {
  EXPECT_EQ(
      ErrorOf("random_resized_crop(224)|hflp(0.5)"),
      "pipeline spec: at 25: unknown operation 'hflp' (known: random_resized_crop, "
      "resize, center_crop, random_crop, random_resize, scale_jitter, hflip, color_jitter, "
      "grayscale, gaussian_blur, rotation, affine, solarize, posterize, equalize, autocontrast, "
      "adjust_sharpness, random_erasing, rand_augment, trivial_augment_wide)");
  EXPECT_NE(ErrorOf("center_crop(8)|color_jitter(0.4,0.4,0.4,0.6)").find("at 40"),
            std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(8)|gaussian_blur(4)").find("odd"), std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(8)|gaussian_blur(3,sigma=0)").find("(0, 1000]"),
            std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(8)|gaussian_blur(3,sigma=1:1e999)").find("(0, 1000]"),
            std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(8)|rotation()").find("needs 'degrees'"), std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(8)|rotation(-5)").find(">= 0"), std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(8)|decode(fast)").find("must come first"), std::string::npos);
  EXPECT_NE(ErrorOf("decode(slow)|center_crop(8)").find("decode(fast) or decode(exact)"),
            std::string::npos);
  EXPECT_NE(ErrorOf("decode(exact)").find("nothing after"), std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(big)").find("takes a number"), std::string::npos);
  EXPECT_NE(ErrorOf("hflip(2)|center_crop(8)").find("at 6: 'p' must be a probability"),
            std::string::npos);
  EXPECT_NE(ErrorOf("random_resized_crop(224,scale=0:1)").find("at 24"), std::string::npos);
  EXPECT_NE(ErrorOf("random_resized_crop(224").find("expected ',' or ')'"), std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(0)").find("must be an integer"), std::string::npos);
  // Found by the fuzzer: sizes beyond int range, NaN and infinity.
  EXPECT_NE(ErrorOf("random_resized_crop(" + std::string(60, '6') + ",scale=0.08:1)")
                .find("must be an integer"),
            std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(1e999)").find("must be an integer"), std::string::npos);
  EXPECT_NE(ErrorOf("center_crop(2.5)").find("must be an integer"), std::string::npos);
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
  for (size_t i = 0; i < a.size(); ++i) {
    sum += std::abs(int{a[i]} - int{b[i]});
  }
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
    if (photo.empty()) {
      continue;
    }
    for (int width : {320, 480, 640}) {
      cv::Mat resized;
      cv::resize(photo, resized, {width, width * photo.rows / photo.cols}, 0, 0, cv::INTER_AREA);
      // Baseline, progressive (width 480) and grayscale (width 640) files.
      std::vector<int> parameters = {cv::IMWRITE_JPEG_QUALITY, 90};
      if (width == 480) {
        parameters.insert(parameters.end(), {cv::IMWRITE_JPEG_PROGRESSIVE, 1});
      }
      if (width == 640) {
        cv::cvtColor(resized, resized, cv::COLOR_BGR2GRAY);
      }
      std::vector<uint8_t> encoded;
      cv::imencode(".jpg", resized, encoded, parameters);
      images.emplace_back(encoded.begin(), encoded.end());
    }
  }
  if (images.empty()) {
    for (int seed = 0; seed < 6; ++seed) {
      images.push_back(testing::MakeJpeg(480, 360, seed));
    }
  }
  int progressive = 0;
  for (const std::string& image : images) {
    progressive += ReadJpegHeader(image, 1 << 30)->progressive;
  }
  EXPECT_GT(progressive, 0);
  return images;
}

// The region decoder (ROI + DCT scaling) against "full decode, crop, resize"
// (OpenCV's decoder, libjpeg's exact defaults): same crop and flip draws,
// pixels within the documented tolerance (docs/pipeline.md), as mean absolute
// difference per channel value over all samples / for the worst sample:
// below 3 / 12 (of 255) in both decode modes. Most of it is the DCT-domain
// downscale (a box filter) against bilinear + 2:1 box halving at small
// outputs; at 224 px it is 0.03 (exact) and 1.3 (fast).
TEST(PipelineTest, RegionDecodeMatchesFullDecodeWithinTolerance) {
  for (const char* mode : {"decode(exact)|", "decode(fast)|"}) {
    for (const char* ops : {"random_resized_crop(224)|hflip(0.5)", "random_resized_crop(64)",
                            "resize(128)|center_crop(112)"}) {
      const std::string spec = std::string(mode) + ops;
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
      std::printf("%s: mean abs difference %.2f on average, %.2f at worst\n", spec.c_str(),
                  total / count, worst);
      EXPECT_LT(total / count, 3.0) << spec;
      EXPECT_LT(worst, 12.0) << spec;
    }
  }
}

}  // namespace
}  // namespace heterodl

namespace heterodl {
namespace {

std::vector<uint8_t> RunOnce(absl::string_view spec, const std::string& image, uint64_t index) {
  absl::StatusOr<Pipeline> pipeline = Pipeline::Parse(spec);
  EXPECT_TRUE(pipeline.ok()) << pipeline.status();
  std::vector<uint8_t> out(pipeline->output_bytes());
  absl::Status status = pipeline->Run(image, {1, 0, index}, out.data());
  EXPECT_TRUE(status.ok()) << status;
  return out;
}

TEST(PipelineTest, ColorOperationsFollowTorchvision) {
  const std::string jpeg = testing::MakeJpeg(96, 96, 2);
  const std::vector<uint8_t> plain = RunOnce("center_crop(64)", jpeg, 0);
  // Zero strength is the identity; so is a zero-degree rotation.
  EXPECT_EQ(RunOnce("center_crop(64)|color_jitter(0,0,0,0)", jpeg, 0), plain);
  EXPECT_EQ(RunOnce("center_crop(64)|rotation(0)", jpeg, 0), plain);
  // grayscale(1): every pixel has R = G = B.
  const std::vector<uint8_t> gray = RunOnce("center_crop(64)|grayscale(1)", jpeg, 0);
  for (size_t i = 0; i < gray.size(); i += 3) {
    ASSERT_EQ(gray[i], gray[i + 1]);
    ASSERT_EQ(gray[i], gray[i + 2]);
  }
  // Random operations change the image, reproducibly per key.
  for (const char* spec :
       {"center_crop(64)|color_jitter(0.4,0.4,0.4,0.1)",
        "center_crop(64)|gaussian_blur(5,sigma=0.5:2)", "center_crop(64)|rotation(30)"}) {
    const std::vector<uint8_t> a = RunOnce(spec, jpeg, 7);
    EXPECT_NE(a, plain) << spec;
    EXPECT_EQ(a, RunOnce(spec, jpeg, 7)) << spec;
  }
}

TEST(PipelineTest, BrightnessScalesPixels) {
  // brightness=1 draws a factor in [0, 2]; a black image stays black.
  cv::Mat black(32, 32, CV_8UC3, cv::Scalar::all(0));
  std::vector<uint8_t> png;
  cv::imencode(".png", black, png);
  const std::vector<uint8_t> out =
      RunOnce("center_crop(32)|color_jitter(brightness=1)", std::string(png.begin(), png.end()), 3);
  EXPECT_EQ(*std::max_element(out.begin(), out.end()), 0);
}

std::string Encode(const cv::Mat& image, const std::string& extension,
                   const std::vector<int>& parameters = {}) {
  std::vector<uint8_t> encoded;
  cv::imencode(extension, image, encoded, parameters);
  return std::string(encoded.begin(), encoded.end());
}

// Overwrites the dimensions of the first SOF0/SOF2 segment of a JPEG.
std::string WithJpegSize(std::string jpeg, int width, int height) {
  for (size_t i = 2; i + 9 < jpeg.size(); ++i) {
    const auto marker = static_cast<uint8_t>(jpeg[i + 1]);
    if (static_cast<uint8_t>(jpeg[i]) == 0xFF && (marker == 0xC0 || marker == 0xC2)) {
      jpeg[i + 5] = static_cast<char>(height >> 8);
      jpeg[i + 6] = static_cast<char>(height & 255);
      jpeg[i + 7] = static_cast<char>(width >> 8);
      jpeg[i + 8] = static_cast<char>(width & 255);
      return jpeg;
    }
  }
  ADD_FAILURE() << "no SOF marker";
  return jpeg;
}

TEST(PipelineSafetyTest, BadInputsAreErrorsNeverCrashes) {
  absl::StatusOr<Pipeline> pipeline = Pipeline::Parse("random_resized_crop(32)|hflip(0.5)");
  std::vector<uint8_t> out(pipeline->output_bytes());
  const std::string jpeg = testing::MakeJpeg(200, 160, 4);
  const auto run = [&](const std::string& data) { return pipeline->Run(data, {}, out.data()); };
  EXPECT_FALSE(run("").ok());
  EXPECT_FALSE(run("plain text, not an image").ok());
  EXPECT_FALSE(run(jpeg.substr(0, 3)).ok());
  EXPECT_FALSE(run(jpeg.substr(0, jpeg.size() / 2)).ok());  // truncated
  absl::Status huge = run(WithJpegSize(jpeg, 60000, 60000));
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.message().find("60000x60000"), std::string::npos) << huge;
  // Corrupt entropy-coded data: an error or some image, never a crash.
  for (size_t at = jpeg.size() / 3; at < jpeg.size() - 2; at += jpeg.size() / 9) {
    std::string corrupt = jpeg;
    corrupt[at] = static_cast<char>(corrupt[at] ^ 0x5A);
    (void)run(corrupt);
  }
  // A PNG whose header claims 30000 x 30000 (its checksum made to match) is
  // refused before allocating.
  std::string png = Encode(cv::Mat(8, 8, CV_8UC3, cv::Scalar::all(9)), ".png");
  for (int i : {16, 20}) {  // IHDR width and height, big-endian
    png[i] = 0, png[i + 1] = 0, png[i + 2] = static_cast<char>(30000 >> 8),
    png[i + 3] = static_cast<char>(30000 & 255);
  }
  std::string wide_png = png;  // 2^32 - 1 square: the product overflows 64 bits
  for (int i = 16; i < 24; ++i) {
    wide_png[i] = '\xff';
  }
  for (std::string* forged : {&png, &wide_png}) {
    EXPECT_FALSE(run(*forged).ok());  // the checksum does not match
    // IHDR's CRC covers its type and data: bytes 12..28, stored at 29.
    const uint32_t crc =
        static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(forged->data() + 12), 17));
    for (int i = 0; i < 4; ++i) {
      (*forged)[29 + i] = static_cast<char>(crc >> (24 - 8 * i));
    }
  }
  EXPECT_FALSE(run(wide_png).ok());
  absl::Status png_status = run(png);
  ASSERT_FALSE(png_status.ok());
  EXPECT_NE(png_status.message().find("30000x30000"), std::string::npos) << png_status;
}

TEST(PipelineSafetyTest, PixelLimitIsConfigurable) {
  PipelineOptions options;
  options.max_pixels = int64_t{100} * 100;
  absl::StatusOr<Pipeline> strict = Pipeline::Parse("center_crop(16)", options);
  std::vector<uint8_t> out(strict->output_bytes());
  EXPECT_TRUE(strict->Run(testing::MakeJpeg(100, 100, 0), {}, out.data()).ok());
  absl::Status refused = strict->Run(testing::MakeJpeg(101, 100, 0), {}, out.data());
  EXPECT_NE(refused.message().find("over the limit of 10000 pixels"), std::string::npos) << refused;
  cv::Mat big(100, 101, CV_8UC3, cv::Scalar::all(1));
  EXPECT_FALSE(strict->Run(Encode(big, ".png"), {}, out.data()).ok());
}

TEST(PipelineSafetyTest, AnOperationThatWouldMakeAnImageOverTheLimitIsRefusedFirst) {
  PipelineOptions options;
  options.max_pixels = int64_t{1} << 20;
  const std::string long_image = testing::MakeJpeg(400, 20, 0);  // 20:1
  // resize(256) makes it 5120 x 256 = 1.3 MP: refused whether it runs fused
  // with decoding (first) or after another operation.
  for (const char* spec :
       {"resize(256)|center_crop(16)", "hflip(0.5)|resize(256)|center_crop(16)"}) {
    absl::StatusOr<Pipeline> pipeline = Pipeline::Parse(spec, options);
    ASSERT_TRUE(pipeline.ok()) << pipeline.status();
    std::vector<uint8_t> out(pipeline->output_bytes());
    const absl::Status refused = pipeline->Run(long_image, {}, out.data());
    EXPECT_TRUE(absl::IsInvalidArgument(refused)) << spec << ": " << refused;
    EXPECT_NE(refused.message().find("resize(256) would make a 5120x256 image of this 400x20 one"),
              std::string::npos)
        << refused;
    EXPECT_TRUE(pipeline->Run(testing::MakeJpeg(40, 30, 0), {}, out.data()).ok()) << spec;
  }
}

TEST(PipelineSafetyTest, AnAbandonedSampleStopsBeforeItIsDecoded) {
  absl::StatusOr<Pipeline> pipeline = Pipeline::Parse("resize(64)|center_crop(32)");
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  std::vector<uint8_t> out(pipeline->output_bytes(), 7);
  std::atomic<bool> abandoned{true};
  const std::string jpeg = testing::MakeJpeg(80, 60, 1);
  const absl::Status stopped = pipeline->Run(jpeg, {}, out.data(), nullptr, &abandoned);
  EXPECT_TRUE(absl::IsCancelled(stopped)) << stopped;
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint8_t v) { return v == 7; }));
  abandoned = false;
  EXPECT_TRUE(pipeline->Run(jpeg, {}, out.data(), nullptr, &abandoned).ok());
}

TEST(PipelineCostTest, RealPipelinesAreCheapAndTheCostliestOperationIsNamed) {
  const auto cost_of = [](absl::string_view spec) {
    absl::StatusOr<Pipeline> pipeline = Pipeline::Parse(spec);
    EXPECT_TRUE(pipeline.ok()) << pipeline.status();
    return pipeline.ok() ? pipeline->EstimateCost() : PipelineCost{};
  };
  // The default: decoding the 1024 x 768 reference photo and one crop.
  const PipelineCost standard = cost_of(kDefaultPipeline);
  EXPECT_GT(standard.pixel_operations, 1024.0 * 768);
  EXPECT_LT(standard.pixel_operations, 3e6);
  EXPECT_EQ(standard.costliest_position, 1);
  // A heavy real recipe: a 2048-pixel segmentation crop, blurred.
  const PipelineCost heavy = cost_of(
      "resize(2048)|gaussian_blur(31)|rotation(10)|center_crop(1024)|color_jitter(0.4,0.4,0.4,0."
      "1)");
  EXPECT_LT(heavy.pixel_operations, 500e6);
  EXPECT_EQ(heavy.costliest_operation, "gaussian_blur(31,sigma=0.1:2)");
  // The attack of the issue: a blur of 255 on an 8192-pixel image, four
  // times. Each costs 2 x 255 x 8192 x 10922 pixel operations.
  const PipelineCost attack = cost_of(
      "resize(8192)|gaussian_blur(255,sigma=1000)|gaussian_blur(255,sigma=1000)|"
      "gaussian_blur(255,sigma=1000)|gaussian_blur(255,sigma=1000)|center_crop(32)");
  EXPECT_NEAR(attack.costliest_pixel_operations, 2.0 * 255 * 8192 * 10922, 1e6);
  EXPECT_GT(attack.pixel_operations, 4 * attack.costliest_pixel_operations);
  EXPECT_EQ(attack.costliest_position, 2);
  EXPECT_EQ(attack.costliest_input_width, 10922);
  EXPECT_EQ(attack.costliest_input_height, 8192);
  EXPECT_DOUBLE_EQ(attack.largest_image_pixels, 8192.0 * 10922);
  // A long chain of cheap operations adds up too.
  std::string chain = "center_crop(224)";
  for (int i = 0; i < 1000; ++i) {
    chain += "|hflip(0.5)";
  }
  EXPECT_GT(cost_of(chain).pixel_operations,
            1000 * (224.0 * 224 + kOperationOverheadPixelOperations));
}

TEST(PipelineTest, SameOutputOnEveryThread) {
  absl::StatusOr<Pipeline> pipeline =
      Pipeline::Parse("random_resized_crop(64)|hflip(0.5)|color_jitter(0.4,0.4,0.4,0.1)");
  const std::string jpeg = testing::MakeJpeg(300, 200, 5);
  std::vector<std::vector<uint8_t>> results(4, std::vector<uint8_t>(pipeline->output_bytes()));
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int repeat = 0; repeat < 20; ++repeat) {
        ASSERT_TRUE(pipeline->Run(jpeg, {9, 4, 77}, results[t].data()).ok());
      }
    });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
  for (const std::vector<uint8_t>& result : results) {
    EXPECT_EQ(result, results[0]);
  }
}

TEST(PipelineTest, EntropyOnlyDecodeIsJpegsAndFollowsTheDrawnRegion) {
  ASSERT_OK_AND_ASSIGN(const Pipeline pipeline, Pipeline::Parse("random_resized_crop(64)"));
  cv::Mat color(240, 320, CV_8UC3);
  cv::randu(color, 0, 255);
  const std::string jpeg = Encode(color, ".jpg");
  for (uint64_t index = 0; index < 8; ++index) {
    EXPECT_OK(pipeline.DecodeEntropyOnly(jpeg, {0, 0, index}));
  }
  // Cut at half the file: some drawn regions lie in the rows it still holds
  // and some reach below them, which is an error as in Run().
  const std::string cut = jpeg.substr(0, jpeg.size() / 2);
  int read = 0;
  int refused = 0;
  std::vector<uint8_t> out(pipeline.output_bytes());
  for (uint64_t index = 0; index < 64; ++index) {
    const absl::Status entropy = pipeline.DecodeEntropyOnly(cut, {0, 0, index});
    (entropy.ok() ? read : refused) += 1;
    if (!entropy.ok()) {
      EXPECT_TRUE(absl::IsInvalidArgument(entropy)) << entropy;
      EXPECT_FALSE(pipeline.Run(cut, {0, 0, index}, out.data()).ok()) << index;
    }
  }
  EXPECT_GT(read, 0);
  EXPECT_GT(refused, 0);
  EXPECT_TRUE(absl::IsUnimplemented(pipeline.DecodeEntropyOnly(Encode(color, ".png"), {})));
  EXPECT_TRUE(absl::IsUnimplemented(pipeline.DecodeEntropyOnly(Encode(color, ".bmp"), {})));
  ASSERT_OK_AND_ASSIGN(const Pipeline views, Pipeline::Parse("2*random_resized_crop(64)"));
  EXPECT_TRUE(absl::IsUnimplemented(views.DecodeEntropyOnly(jpeg, {})));
}

TEST(PipelineSafetyTest, EveryFormatDecodes) {
  absl::StatusOr<Pipeline> pipeline = Pipeline::Parse("center_crop(16)");
  std::vector<uint8_t> out(pipeline->output_bytes());
  cv::Mat color(40, 48, CV_8UC3, cv::Scalar(10, 20, 30));  // BGR
  cv::Mat gray(40, 48, CV_8UC1, cv::Scalar(77));
  const std::vector<std::string> images = {
      Encode(color, ".png"),
      Encode(color, ".bmp"),
      Encode(color, ".webp"),
      Encode(color, ".tiff"),
      Encode(gray, ".jpg"),
      Encode(gray, ".png"),
      Encode(color, ".jpg", {cv::IMWRITE_JPEG_PROGRESSIVE, 1})};
  for (size_t i = 0; i < images.size(); ++i) {
    ASSERT_TRUE(pipeline->Run(images[i], {}, out.data()).ok()) << i;
  }
  ASSERT_TRUE(pipeline->Run(Encode(color, ".png"), {}, out.data()).ok());
  EXPECT_EQ(out[0], 30);  // RGB order out
  EXPECT_EQ(out[2], 10);
}

TEST(JpegHeaderTest, ExifOrientationIsRead) {
  const std::string rotated = testing::WithExifOrientation(testing::MakeJpeg(64, 32, 1), 6);
  absl::StatusOr<JpegHeader> header = ReadJpegHeader(rotated, 1 << 30);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->orientation, 6);
  EXPECT_TRUE(header->fast_path_ok);  // region_decode applies it
  absl::StatusOr<cv::Mat> decoded = DecodeImage(rotated);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->cols, 32);  // turned upright
  EXPECT_EQ(decoded->rows, 64);
}

}  // namespace
}  // namespace heterodl
