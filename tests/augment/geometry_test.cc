// Rectangular sizes and the segmentation recipe's operations (random_crop,
// random_resize, scale_jitter), with torchvision v2's semantics. Compared
// with torchvision itself in tests/python/transforms_test.py.
#include <png.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "augment/pipeline.h"
#include "augment/png_decoder.h"
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

// A scene of four classes, each a colour: 0 the gray background, 1 a red
// rectangle, 2 a green disc, 3 a blue band; and its mask of class ids.
struct Scene {
  cv::Mat image;
  cv::Mat mask;
};
const cv::Vec3b kClassColours[] = {{128, 128, 128}, {255, 0, 0}, {0, 255, 0}, {0, 0, 255}};

Scene PaintScene(int width, int height) {
  Scene scene{cv::Mat(height, width, CV_8UC3, cv::Scalar(128, 128, 128)),
              cv::Mat(height, width, CV_8UC1, cv::Scalar(0))};
  const auto paint = [&](uint8_t id, const auto& draw) {
    draw(scene.image, cv::Scalar(kClassColours[id][0], kClassColours[id][1], kClassColours[id][2]));
    draw(scene.mask, cv::Scalar(id));
  };
  paint(1, [&](cv::Mat& m, const cv::Scalar& c) {
    cv::rectangle(m, cv::Rect(width / 10, height / 8, width / 3, height / 3), c, cv::FILLED);
  });
  paint(2, [&](cv::Mat& m, const cv::Scalar& c) {
    cv::circle(m, {width * 2 / 3, height / 2}, height / 4, c, cv::FILLED);
  });
  paint(3, [&](cv::Mat& m, const cv::Scalar& c) {
    cv::rectangle(m, cv::Rect(0, height * 5 / 6, width, height / 6), c, cv::FILLED);
  });
  return scene;
}

// Runs `spec` on the scene with its mask; the image and the mask out.
absl::StatusOr<std::pair<cv::Mat, cv::Mat>> RunWithMask(const std::string& spec, const Scene& scene,
                                                        uint64_t index) {
  absl::StatusOr<Pipeline> pipeline = Pipeline::Parse(spec);
  if (!pipeline.ok()) {
    return pipeline.status();
  }
  cv::Mat image(pipeline->output_height(), pipeline->output_width(), CV_8UC3);
  cv::Mat mask(pipeline->output_height(), pipeline->output_width(), CV_8UC1);
  SegmentationMask ids{scene.mask.data, scene.mask.cols, scene.mask.rows, 1, 255, mask.data};
  const absl::Status run =
      pipeline->Run(Png(scene.image), {7, 0, index}, image.data, nullptr, nullptr, &ids);
  if (!run.ok()) {
    return run;
  }
  return std::make_pair(image, mask);
}

TEST(MaskTest, EveryGeometricOperationMovesTheMaskWithTheImage) {
  const Scene scene = PaintScene(160, 120);
  for (const char* spec : {
           "random_resized_crop(48x64)",
           "resize(40x50)",
           "random_resize(100,200)|random_crop(96x128,pad_if_needed=true)",
           "hflip(1)|rotation(30)|center_crop(100x120)",
           "scale_jitter(60x80,scale_range=0.5:2)|center_crop(70)",
           "resize(64)|random_crop(72,padding=4)",
           "center_crop(140x180)",
       }) {
    for (uint64_t index = 0; index < 8; ++index) {
      absl::StatusOr<std::pair<cv::Mat, cv::Mat>> out = RunWithMask(spec, scene, index);
      ASSERT_TRUE(out.ok()) << spec << ": " << out.status();
      const auto& [image, mask] = *out;
      // Without the mask, the same image: the mask draws nothing of its own.
      EXPECT_TRUE(Same(image, RunOn(spec, scene.image, index))) << spec;
      int pixels = 0;
      int on_their_colour = 0;
      for (int y = 0; y < mask.rows; ++y) {
        for (int x = 0; x < mask.cols; ++x) {
          const uint8_t id = mask.at<uint8_t>(y, x);
          const cv::Vec3b pixel = image.at<cv::Vec3b>(y, x);
          if (id == 255) {
            // Padding or a rotation's corner: black in the image.
            EXPECT_EQ(pixel, cv::Vec3b(0, 0, 0)) << spec << " at " << x << "," << y;
            continue;
          }
          ASSERT_LT(id, 4) << spec;
          ++pixels;
          on_their_colour += cv::norm(pixel, kClassColours[id], cv::NORM_INF) <= 8;
        }
      }
      // Bilinear images blend the classes' edges; nearest masks do not.
      EXPECT_GE(on_their_colour, pixels * 9 / 10)
          << spec << " sample " << index << ": " << on_their_colour << " of " << pixels;
    }
  }
}

// The scene's red rectangle and green disc as detection boxes (xyxy, the
// image spanning [0, width]), as PaintScene draws them.
std::vector<Box> SceneBoxes(int width, int height) {
  const cv::Rect rectangle(width / 10, height / 8, width / 3, height / 3);
  const int radius = height / 4;
  const cv::Point centre(width * 2 / 3, height / 2);
  return {{static_cast<float>(rectangle.x), static_cast<float>(rectangle.y),
           static_cast<float>(rectangle.br().x), static_cast<float>(rectangle.br().y)},
          {static_cast<float>(centre.x - radius), static_cast<float>(centre.y - radius),
           static_cast<float>(centre.x + radius + 1), static_cast<float>(centre.y + radius + 1)}};
}

// The bounding rectangle of the pixels of class `id` in `mask`, as a box.
std::optional<Box> PixelsBox(const cv::Mat& mask, uint8_t id) {
  cv::Mat of_class = mask == id;
  if (cv::countNonZero(of_class) == 0) {
    return std::nullopt;
  }
  const cv::Rect rect = cv::boundingRect(of_class);
  return Box{static_cast<float>(rect.x), static_cast<float>(rect.y),
             static_cast<float>(rect.br().x), static_cast<float>(rect.br().y)};
}

TEST(BoxTest, BoxesFollowTheirShapesThroughEveryGeometricOperation) {
  const Scene scene = PaintScene(160, 120);
  for (const char* spec : {
           "random_resized_crop(48x64)",
           "resize(40x50)|hflip(1)",
           "random_resize(100,200)|random_crop(96x128,pad_if_needed=true)",
           "scale_jitter(60x80,scale_range=0.5:2)|center_crop(70)",
           "resize(64)|random_crop(72,padding=4)|hflip(0.5)",
           "center_crop(140x180)",
       }) {
    absl::StatusOr<Pipeline> pipeline = Pipeline::Parse(spec);
    ASSERT_TRUE(pipeline.ok()) << pipeline.status();
    for (uint64_t index = 0; index < 8; ++index) {
      cv::Mat image(pipeline->output_height(), pipeline->output_width(), CV_8UC3);
      cv::Mat mask(pipeline->output_height(), pipeline->output_width(), CV_8UC1);
      SegmentationMask ids{scene.mask.data, scene.mask.cols, scene.mask.rows, 1, 255, mask.data};
      SampleBoxes boxes{SceneBoxes(160, 120)};
      ASSERT_TRUE(
          pipeline->Run(Png(scene.image), {7, 0, index}, image.data, nullptr, nullptr, &ids, &boxes)
              .ok());
      // The image is the one a run without targets makes.
      EXPECT_TRUE(Same(image, RunOn(spec, scene.image, index))) << spec;
      // Each shape still in the image has its box, around the same pixels
      // (the mask's, nearest-sampled: within a pixel and a half of the box's
      // scaled edges); a shape cropped away has none.
      for (uint8_t id = 1; id <= 2; ++id) {
        const std::optional<Box> pixels = PixelsBox(mask, id);
        const auto kept = std::find(boxes.kept_indices.begin(), boxes.kept_indices.end(), id - 1);
        if (!pixels) {
          EXPECT_EQ(kept, boxes.kept_indices.end()) << spec << " sample " << index;
          continue;
        }
        ASSERT_NE(kept, boxes.kept_indices.end())
            << spec << " sample " << index << " class " << int{id};
        const Box& box = boxes.kept[kept - boxes.kept_indices.begin()];
        const std::string where = absl::StrCat(spec, " sample ", index, " class ", id);
        // Every pixel of the shape inside its box.
        EXPECT_LE(box.x1, pixels->x1 + 1.5) << where;
        EXPECT_LE(box.y1, pixels->y1 + 1.5) << where;
        EXPECT_GE(box.x2, pixels->x2 - 1.5) << where;
        EXPECT_GE(box.y2, pixels->y2 - 1.5) << where;
        if (id == 1) {
          // A rectangle cut by the image's edge is still a rectangle: its box
          // is its pixels' (a disc cut is less than its clipped box).
          for (const auto& [ours, theirs] :
               {std::pair(box.x1, pixels->x1), std::pair(box.y1, pixels->y1),
                std::pair(box.x2, pixels->x2), std::pair(box.y2, pixels->y2)}) {
            EXPECT_NEAR(ours, theirs, 1.5) << where;
          }
        }
      }
    }
  }
}

TEST(BoxTest, ARotationGivesTheHullOfTheRotatedCornersAndCroppedAwayBoxesAreDropped) {
  const Scene scene = PaintScene(160, 120);
  absl::StatusOr<Pipeline> pipeline = Pipeline::Parse("rotation(90:90)|center_crop(120x160)");
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  cv::Mat image(120, 160, CV_8UC3);
  // A box in the middle, and one that the rotation takes out of the image.
  SampleBoxes boxes{{{70, 50, 90, 70}, {0, 0, 10, 10}}};
  ASSERT_TRUE(
      pipeline->Run(Png(scene.image), {1, 0, 0}, image.data, nullptr, nullptr, nullptr, &boxes)
          .ok());
  ASSERT_EQ(boxes.kept_indices, std::vector<int>{0});
  // A quarter turn about the middle (80, 60): 20x20 stays 20x20, centred.
  EXPECT_NEAR(boxes.kept[0].x1, 70, 1e-3);
  EXPECT_NEAR(boxes.kept[0].y1, 50, 1e-3);
  EXPECT_NEAR(boxes.kept[0].x2, 90, 1e-3);
  EXPECT_NEAR(boxes.kept[0].y2, 70, 1e-3);
  // Half a box left in the image: kept by default, dropped when at least
  // 60% must be visible.
  PipelineOptions options;
  options.min_box_visibility = 0.6;
  absl::StatusOr<Pipeline> strict = Pipeline::Parse("center_crop(120x100)", options);
  ASSERT_TRUE(strict.ok());
  absl::StatusOr<Pipeline> lenient = Pipeline::Parse("center_crop(120x100)");
  ASSERT_TRUE(lenient.ok());
  cv::Mat cropped(120, 100, CV_8UC3);
  SampleBoxes half{{{20, 10, 40, 30}}};  // the crop keeps x from 30
  ASSERT_TRUE(
      lenient->Run(Png(scene.image), {1, 0, 0}, cropped.data, nullptr, nullptr, nullptr, &half)
          .ok());
  ASSERT_EQ(half.kept.size(), 1u);
  EXPECT_NEAR(half.kept[0].x1, 0, 1e-3);
  EXPECT_NEAR(half.kept[0].x2, 10, 1e-3);
  ASSERT_TRUE(
      strict->Run(Png(scene.image), {1, 0, 0}, cropped.data, nullptr, nullptr, nullptr, &half)
          .ok());
  EXPECT_TRUE(half.kept.empty());
}

TEST(MaskTest, PhotometricOperationsLeaveTheMaskAlone) {
  const Scene scene = PaintScene(64, 48);
  absl::StatusOr<std::pair<cv::Mat, cv::Mat>> out = RunWithMask(
      "color_jitter(0.4,0.4,0.4,0.1)|grayscale(1)|gaussian_blur(5)|center_crop(48x64)", scene, 1);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(Same(out->second, scene.mask));
}

TEST(MaskTest, AMaskOfAnotherSizeIsABadSample) {
  const Scene scene = PaintScene(64, 48);
  Scene wrong{scene.image, PaintScene(64, 47).mask};
  for (const char* spec : {"random_resized_crop(32)", "hflip(0.5)|center_crop(32)"}) {
    const absl::Status status = RunWithMask(spec, wrong, 0).status();
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << spec << ": " << status;
    EXPECT_NE(status.message().find("a mask of 64x47 for an image of 64x48"), std::string::npos)
        << status;
  }
}

TEST(MaskTest, SixteenBitIdsMoveToo) {
  const Scene scene = PaintScene(64, 48);
  cv::Mat wide;
  scene.mask.convertTo(wide, CV_16UC1, 1000);  // ids 0, 1000, 2000, 3000
  absl::StatusOr<Pipeline> pipeline = Pipeline::Parse("hflip(1)|center_crop(40)");
  ASSERT_TRUE(pipeline.ok());
  std::vector<uint8_t> image(pipeline->output_bytes());
  cv::Mat out(40, 40, CV_16UC1);
  SegmentationMask ids{wide.data, 64, 48, 2, 65535, out.data};
  ASSERT_TRUE(pipeline->Run(Png(scene.image), {}, image.data(), nullptr, nullptr, &ids).ok());
  cv::Mat expected;
  cv::flip(wide, expected, 1);
  EXPECT_EQ(cv::norm(out, expected(cv::Rect(12, 4, 40, 40)), cv::NORM_INF), 0);
}

// A palette PNG of `ids` (each < 2^bit_depth), as VOC's masks are stored.
std::string PalettePng(const cv::Mat& ids, int bit_depth) {
  std::string bytes;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(
      png, &bytes,
      [](png_structp p, png_bytep data, png_size_t length) {
        static_cast<std::string*>(png_get_io_ptr(p))->append(reinterpret_cast<char*>(data), length);
      },
      nullptr);
  png_set_IHDR(png, info, ids.cols, ids.rows, bit_depth, PNG_COLOR_TYPE_PALETTE, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  std::vector<png_color> palette(size_t{1} << bit_depth);
  for (size_t i = 0; i < palette.size(); ++i) {  // colours unlike the ids
    palette[i] = {static_cast<png_byte>(255 - i), static_cast<png_byte>(i * 7), 9};
  }
  png_set_PLTE(png, info, palette.data(), static_cast<int>(palette.size()));
  png_write_info(png, info);
  png_set_packing(png);
  for (int y = 0; y < ids.rows; ++y) {
    png_write_row(png, ids.ptr(y));
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return bytes;
}

TEST(MaskTest, PngMasksDecodeToTheirClassIds) {
  const cv::Mat ids = PaintScene(37, 23).mask;  // 0..3
  std::vector<uint8_t> encoded;
  ASSERT_TRUE(cv::imencode(".png", ids, encoded));
  absl::StatusOr<cv::Mat> gray =
      DecodePngMask({reinterpret_cast<const char*>(encoded.data()), encoded.size()}, 1 << 20);
  ASSERT_TRUE(gray.ok()) << gray.status();
  EXPECT_EQ(cv::norm(*gray, ids, cv::NORM_INF), 0);
  // A palette's indices, not its colours; packed 4-bit ones too.
  for (const int depth : {8, 4, 2}) {
    absl::StatusOr<cv::Mat> palette = DecodePngMask(PalettePng(ids, depth), 1 << 20);
    ASSERT_TRUE(palette.ok()) << depth << ": " << palette.status();
    EXPECT_EQ(palette->type(), CV_8UC1);
    EXPECT_EQ(cv::norm(*palette, ids, cv::NORM_INF), 0) << depth;
  }
  // 16-bit ids, in this host's byte order.
  cv::Mat wide;
  ids.convertTo(wide, CV_16UC1, 1000);
  ASSERT_TRUE(cv::imencode(".png", wide, encoded));
  absl::StatusOr<cv::Mat> sixteen =
      DecodePngMask({reinterpret_cast<const char*>(encoded.data()), encoded.size()}, 1 << 20);
  ASSERT_TRUE(sixteen.ok()) << sixteen.status();
  EXPECT_EQ(sixteen->type(), CV_16UC1);
  EXPECT_EQ(cv::norm(*sixteen, wide, cv::NORM_INF), 0);
}

TEST(MaskTest, WhatIsNoMaskIsRefused) {
  const std::string colour = Png(Coordinates(8, 8));
  const absl::Status rgb = DecodePngMask(colour, 1 << 20).status();
  EXPECT_TRUE(absl::IsInvalidArgument(rgb)) << rgb;
  EXPECT_NE(rgb.message().find("not colour type 2"), std::string::npos) << rgb;
  const std::string mask = PalettePng(PaintScene(16, 16).mask, 8);
  EXPECT_FALSE(DecodePngMask(mask.substr(0, mask.size() / 2), 1 << 20).ok());
  EXPECT_FALSE(DecodePngMask(mask, 100).ok());  // over the pixel limit
  EXPECT_FALSE(DecodePngMask("not a png", 1 << 20).ok());
}

}  // namespace
}  // namespace heterodl
