// The PNG and WebP region paths against OpenCV's full decode of the same file
// (the reference), and their handling of bad input.
#include "augment/region_decode.h"

#include <png.h>
#include <zlib.h>

#include <string>
#include <vector>

#include "augment/pipeline.h"
#include "gtest/gtest.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"
#include "opencv2/imgproc.hpp"
#include "tests/testing/status_testing.h"
#include "tests/testing/test_images.h"

namespace heterodl {
namespace {

// A smooth colour pattern with some texture, as 8-bit BGR.
cv::Mat Pattern(int width, int height, int seed) {
  cv::Mat image(height, width, CV_8UC3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      image.at<cv::Vec3b>(y, x) =
          cv::Vec3b(static_cast<uint8_t>((x * 3 + seed * 40 + (x * y) % 7) & 255),
                    static_cast<uint8_t>((y * 2 + seed * 70) & 255),
                    static_cast<uint8_t>(((x + y) + seed * 13) & 255));
    }
  }
  return image;
}

std::string Encode(const cv::Mat& image, const std::string& extension,
                   const std::vector<int>& parameters = {}) {
  std::vector<uint8_t> encoded;
  EXPECT_TRUE(cv::imencode(extension, image, encoded, parameters)) << extension;
  return std::string(encoded.begin(), encoded.end());
}

void AppendToString(png_structp png, png_bytep data, png_size_t length) {
  static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<char*>(data), length);
}

// A PNG written by libpng: the kinds OpenCV cannot write (palette, gray +
// alpha, interlaced). `samples` holds color_type's channels per pixel.
std::string EncodeWithLibpng(int width, int height, int color_type, bool interlaced,
                             std::vector<uint8_t> samples) {
  std::string png_bytes;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(png, &png_bytes, AppendToString, nullptr);
  png_set_IHDR(png, info, width, height, 8, color_type,
               interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  std::vector<png_color> palette(16);
  if (color_type == PNG_COLOR_TYPE_PALETTE) {
    for (int i = 0; i < 16; ++i) {
      palette[i] = {static_cast<png_byte>(i * 16), static_cast<png_byte>(255 - i * 9),
                    static_cast<png_byte>(i * 5)};
    }
    png_set_PLTE(png, info, palette.data(), 16);
  }
  png_write_info(png, info);
  const size_t row_bytes = samples.size() / height;
  std::vector<png_bytep> rows(height);
  for (int y = 0; y < height; ++y) {
    rows[y] = samples.data() + y * row_bytes;
  }
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return png_bytes;
}

struct Case {
  std::string name;
  std::string encoded;
};

std::vector<Case> PngCases() {
  const cv::Mat bgr = Pattern(203, 157, 1);
  cv::Mat bgra, gray, bgr16, gray16;
  cv::cvtColor(bgr, bgra, cv::COLOR_BGR2BGRA);
  for (int y = 0; y < bgra.rows; ++y) {
    bgra.at<cv::Vec4b>(y, y % bgra.cols)[3] = 0;
  }
  cv::cvtColor(bgr, gray, cv::COLOR_BGR2GRAY);
  bgr.convertTo(bgr16, CV_16UC3, 257.0, 3);  // low bytes differ from the high ones
  gray.convertTo(gray16, CV_16UC1, 257.0, 5);
  const int width = 203, height = 157;
  std::vector<uint8_t> indices(size_t{width} * height), gray_alpha(size_t{width} * height * 2);
  for (int i = 0; i < width * height; ++i) {
    indices[i] = static_cast<uint8_t>((i / 7 + i / width) % 16);
    gray_alpha[size_t{2} * i] = static_cast<uint8_t>(i * 3);
    gray_alpha[2 * i + 1] = static_cast<uint8_t>(i);
  }
  std::vector<uint8_t> rgb(bgr.total() * 3);
  cv::Mat rgb_view(height, width, CV_8UC3, rgb.data());
  cv::cvtColor(bgr, rgb_view, cv::COLOR_BGR2RGB);
  return {{"RGB 8-bit", Encode(bgr, ".png")},
          {"RGBA 8-bit", Encode(bgra, ".png")},
          {"gray 8-bit", Encode(gray, ".png")},
          {"RGB 16-bit", Encode(bgr16, ".png")},
          {"gray 16-bit", Encode(gray16, ".png")},
          {"palette", EncodeWithLibpng(width, height, PNG_COLOR_TYPE_PALETTE, false, indices)},
          {"gray + alpha", EncodeWithLibpng(width, height, PNG_COLOR_TYPE_GA, false, gray_alpha)},
          {"interlaced RGB", EncodeWithLibpng(width, height, PNG_COLOR_TYPE_RGB, true, rgb)},
          {"interlaced palette",
           EncodeWithLibpng(width, height, PNG_COLOR_TYPE_PALETTE, true, indices)}};
}

// OpenCV's decode of the whole file, as RGB: the reference.
cv::Mat ReferenceRgb(const std::string& encoded) {
  cv::Mat bgr = cv::imdecode(
      cv::Mat(1, static_cast<int>(encoded.size()), CV_8UC1, const_cast<char*>(encoded.data())),
      cv::IMREAD_COLOR);
  cv::Mat rgb;
  if (!bgr.empty()) {
    cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
  }
  return rgb;
}

const std::vector<cv::Rect>& Regions() {
  static const std::vector<cv::Rect> regions = {
      {0, 0, 203, 157}, {1, 0, 40, 17}, {57, 33, 101, 89}, {0, 120, 203, 37}, {202, 156, 1, 1}};
  return regions;
}

// PNG is lossless and the region path neither scales nor converts beyond
// RGB: every kind matches OpenCV's decode exactly, in every region, whether
// libdeflate inflates the pixel data whole or libpng inflates it row by row.
TEST(PngRegionTest, EveryKindMatchesOpenCvExactly) {
  for (const Case& test : PngCases()) {
    SCOPED_TRACE(test.name);
    const cv::Mat reference = ReferenceRgb(test.encoded);
    ASSERT_FALSE(reference.empty());
    ASSERT_OK_AND_ASSIGN(const std::optional<ImageHeader> header,
                         ReadImageHeader(test.encoded, 1 << 30));
    ASSERT_TRUE(header.has_value());
    EXPECT_EQ(header->size, cv::Size(203, 157));
    EXPECT_EQ(header->png.inflate_whole, !header->png.interlaced);
    for (bool whole : {false, true}) {
      if (whole && header->png.interlaced) {
        continue;
      }
      ImageHeader path = *header;
      path.png.inflate_whole = whole;
      for (const cv::Rect& region : Regions()) {
        cv::Mat out;
        for (bool exact : {false, true}) {
          ASSERT_OK(DecodeRegion(test.encoded, path, {region, region.size()}, exact, out));
          ASSERT_EQ(out.size(), region.size());
          EXPECT_EQ(cv::norm(out, reference(region), cv::NORM_INF), 0) << region << whole;
        }
      }
    }
  }
}

struct Chunk {
  std::string type;
  std::string data;
  size_t data_offset = 0;  // where `data` starts in the file read
};

// A PNG file's chunks, after its signature.
std::vector<Chunk> Chunks(const std::string& png) {
  std::vector<Chunk> chunks;
  size_t at = 8;
  while (at + 12 <= png.size()) {
    const uint32_t length = png_get_uint_32(reinterpret_cast<png_const_bytep>(png.data() + at));
    chunks.push_back({png.substr(at + 4, 4), png.substr(at + 8, length), at + 8});
    at += 12 + length;
  }
  return chunks;
}

std::string BigEndian32(uint32_t value) {
  return {static_cast<char>(value >> 24), static_cast<char>(value >> 16),
          static_cast<char>(value >> 8), static_cast<char>(value)};
}

// A PNG file of `chunks`, each with its CRC-32.
std::string Assemble(const std::vector<Chunk>& chunks) {
  std::string png = "\x89PNG\r\n\x1a\n";
  for (const Chunk& chunk : chunks) {
    const std::string typed = chunk.type + chunk.data;
    png += BigEndian32(static_cast<uint32_t>(chunk.data.size())) + typed +
           BigEndian32(static_cast<uint32_t>(
               crc32(0, reinterpret_cast<const Bytef*>(typed.data()), typed.size())));
  }
  return png;
}

// `png` with its pixel data cut into IDAT chunks of `size` bytes (0: one).
std::string WithPixelChunksOf(const std::string& png, size_t size) {
  std::vector<Chunk> chunks, recut;
  std::string pixels;
  for (const Chunk& chunk : Chunks(png)) {
    if (chunk.type != "IDAT") {
      chunks.push_back(chunk);
      continue;
    }
    if (pixels.empty()) {
      chunks.push_back({"IDAT", ""});  // where they go
    }
    pixels += chunk.data;
  }
  for (Chunk& chunk : chunks) {
    if (chunk.type != "IDAT") {
      recut.push_back(chunk);
      continue;
    }
    for (size_t at = 0; at < pixels.size(); at += size == 0 ? pixels.size() : size) {
      recut.push_back({"IDAT", pixels.substr(at, size == 0 ? pixels.size() : size)});
    }
  }
  return Assemble(recut);
}

// `png` with its header claiming `height` rows.
std::string WithHeight(const std::string& png, uint32_t height) {
  std::vector<Chunk> chunks = Chunks(png);
  chunks[0].data.replace(4, 4, BigEndian32(height));
  return Assemble(chunks);
}

// Encoders cut the pixel data into chunks of 8 KiB, 64 KiB or one: the
// chunks are joined before inflating, wherever they are cut.
TEST(PngRegionTest, HowThePixelDataIsCutIntoChunksChangesNothing) {
  for (const Case& test : {PngCases()[0], PngCases()[5]}) {
    SCOPED_TRACE(test.name);
    const cv::Mat reference = ReferenceRgb(test.encoded);
    for (size_t size : {size_t{0}, size_t{1}, size_t{100}}) {
      const std::string recut = WithPixelChunksOf(test.encoded, size);
      if (size != 0) {
        ASSERT_NE(recut, test.encoded);
      }
      ASSERT_OK_AND_ASSIGN(const std::optional<ImageHeader> header,
                           ReadImageHeader(recut, 1 << 30));
      ASSERT_TRUE(header->png.inflate_whole);
      const cv::Rect region(10, 20, 150, 100);
      cv::Mat out;
      ASSERT_OK(DecodeRegion(recut, *header, {region, region.size()}, false, out));
      EXPECT_EQ(cv::norm(out, reference(region), cv::NORM_INF), 0) << size;
    }
  }
}

// A header claiming fewer rows than the pixel data holds: libpng reads the
// rows it claims and ignores the rest; so does the whole-inflate path.
TEST(PngRegionTest, PixelDataBeyondTheImagesRowsIsIgnoredAsLibpngDoes) {
  const Case test = PngCases()[0];
  const cv::Mat reference = ReferenceRgb(test.encoded);
  const std::string shorter = WithHeight(test.encoded, 140);
  ASSERT_OK_AND_ASSIGN(const std::optional<ImageHeader> header, ReadImageHeader(shorter, 1 << 30));
  ASSERT_EQ(header->size, cv::Size(203, 140));
  ASSERT_TRUE(header->png.inflate_whole);
  const cv::Rect region(0, 0, 203, 140);
  cv::Mat out;
  ASSERT_OK(DecodeRegion(shorter, *header, {region, region.size()}, false, out));
  EXPECT_EQ(cv::norm(out, reference(region), cv::NORM_INF), 0);
}

// A header claiming more rows than the pixel data holds: an error even for
// a region above the missing rows, so a file fails every epoch or none.
TEST(PngRegionTest, PixelDataShortOfTheImagesRowsIsAnErrorForEveryRegion) {
  const std::string taller = WithHeight(PngCases()[0].encoded, 170);
  ASSERT_OK_AND_ASSIGN(const std::optional<ImageHeader> header, ReadImageHeader(taller, 1 << 30));
  ASSERT_TRUE(header->png.inflate_whole);
  cv::Mat out;
  const absl::Status status = DecodeRegion(taller, *header, {{0, 0, 50, 50}, {50, 50}}, false, out);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_NE(status.message().find("less pixel data"), std::string::npos) << status;
}

// Whole inflation holds every row at once: images past the bound are
// inflated by libpng, a row at a time. (Only their headers are needed.)
TEST(PngRegionTest, ImagesOverTheInflateBoundAreInflatedRowByRow) {
  constexpr uint32_t kWidth = 20000;
  const size_t row = kWidth * 3 + 1;
  const uint32_t highest_whole = static_cast<uint32_t>(kMaxWholeInflateBytes / row);
  for (uint32_t height : {highest_whole, highest_whole + 1}) {
    const std::string ihdr =
        BigEndian32(kWidth) + BigEndian32(height) + std::string("\x08\x02\0\0\0", 5);
    const std::string png = Assemble({{"IHDR", ihdr}, {"IDAT", "x"}, {"IEND", ""}});
    ASSERT_OK_AND_ASSIGN(const std::optional<ImageHeader> header,
                         ReadImageHeader(png, int64_t{1} << 40));
    EXPECT_EQ(header->png.stored_row_bytes, kWidth * 3u);
    EXPECT_EQ(header->png.inflate_whole, height == highest_whole) << height;
  }
}

std::vector<Case> WebpCases() {
  return {{"lossy", Encode(Pattern(301, 203, 2), ".webp", {cv::IMWRITE_WEBP_QUALITY, 90})},
          {"lossless", Encode(Pattern(301, 203, 3), ".webp", {cv::IMWRITE_WEBP_QUALITY, 101})}};
}

double MeanAbsoluteDifference(const cv::Mat& a, const cv::Mat& b) {
  return cv::norm(a, b, cv::NORM_L1) / static_cast<double>(a.total() * a.channels());
}

// Cropping inside libwebp is exact: the crop of OpenCV's decode. (Fancy
// upsampling, always on, is what OpenCV's decode uses too.)
TEST(WebpRegionTest, CropsMatchOpenCvExactly) {
  for (const Case& test : WebpCases()) {
    SCOPED_TRACE(test.name);
    const cv::Mat reference = ReferenceRgb(test.encoded);
    ASSERT_OK_AND_ASSIGN(const std::optional<ImageHeader> header,
                         ReadImageHeader(test.encoded, 1 << 30));
    ASSERT_TRUE(header.has_value());
    for (const cv::Rect& region :
         {cv::Rect(0, 0, 301, 203), cv::Rect(1, 3, 77, 51), cv::Rect(150, 100, 151, 103)}) {
      cv::Mat out;
      ASSERT_OK(DecodeRegion(test.encoded, *header, {region, region.size()}, true, out));
      EXPECT_EQ(cv::norm(out, reference(region), cv::NORM_INF), 0) << region;
    }
  }
}

// Scaled inside the decoder (an area average) against crop + the
// pipeline's resize of OpenCV's decode: close, not equal.
TEST(WebpRegionTest, ScaledRegionsStayWithinTolerance) {
  for (const Case& test : WebpCases()) {
    SCOPED_TRACE(test.name);
    const cv::Mat reference = ReferenceRgb(test.encoded);
    ASSERT_OK_AND_ASSIGN(const std::optional<ImageHeader> header,
                         ReadImageHeader(test.encoded, 1 << 30));
    const cv::Rect region(20, 10, 250, 180);
    for (const cv::Size output : {cv::Size(224, 160), cv::Size(64, 64)}) {
      // Shrunk as far as the pipeline's resize would halve it.
      const cv::Size shrunk = HalvedSize(region.size(), output);
      cv::Mat out, expected;
      ASSERT_OK(DecodeRegion(test.encoded, *header, {region, output}, false, out));
      ASSERT_EQ(out.size(), shrunk);
      ResizeTo(reference(region), shrunk, expected);
      EXPECT_LT(MeanAbsoluteDifference(out, expected), 3.0) << output;
    }
  }
}

// Photos when the sample dataset's sources are installed (real textures
// are what the tolerance is about); the synthetic pattern otherwise.
std::vector<cv::Mat> Photos() {
  std::vector<cv::Mat> photos;
  for (const char* path : {"/usr/share/backgrounds/mate/nature/Dune.jpg",
                           "/usr/share/backgrounds/mate/nature/LadyBird.jpg"}) {
    cv::Mat photo = cv::imread(path, cv::IMREAD_REDUCED_COLOR_4);
    if (photo.empty()) {
      continue;
    }
    for (int width : {320, 560}) {
      cv::Mat resized;
      cv::resize(photo, resized, {width, width * photo.rows / photo.cols}, 0, 0, cv::INTER_AREA);
      photos.push_back(resized);
    }
  }
  if (photos.empty()) {
    photos = {Pattern(320, 240, 4), Pattern(560, 400, 5)};
  }
  return photos;
}

// Runs `spec` with the region paths and with OpenCV's full decode over 12
// random draws; the mean absolute difference per channel value, on average
// and at worst.
std::pair<double, double> CompareWithFullDecode(const std::string& spec, const std::string& encoded,
                                                const PipelineOptions& options = {}) {
  PipelineOptions reference_options;
  reference_options.region_decode = false;
  const Pipeline ours = *Pipeline::Parse(spec, options);
  const Pipeline reference = *Pipeline::Parse(spec, reference_options);
  double total = 0, worst = 0;
  for (uint64_t index = 0; index < 12; ++index) {
    std::vector<uint8_t> a(ours.output_bytes()), b(reference.output_bytes());
    EXPECT_OK(ours.Run(encoded, {5, 0, index}, a.data()));
    EXPECT_OK(reference.Run(encoded, {5, 0, index}, b.data()));
    double sum = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      sum += std::abs(int{a[i]} - int{b[i]});
    }
    total += sum / a.size();
    worst = std::max(worst, sum / a.size());
  }
  return {total / 12, worst};
}

constexpr const char* kSpecs[] = {"decode(exact)|random_resized_crop(64)|hflip(0.5)",
                                  "random_resized_crop(224)", "resize(100)|center_crop(96)",
                                  "center_crop(120)|hflip(0.5)"};

// PNG: the same pixels into the same resize: the same output, exactly,
// with the pixel data inflated whole or by libpng.
TEST(RegionPipelineTest, PngOutputsEqualFullDecode) {
  for (bool whole : {true, false}) {
    PipelineOptions options;
    options.png_inflate_whole = whole;
    EXPECT_EQ(Pipeline::Parse("random_resized_crop(64)", options)
                  ->DecodePath(PngCases()[0].encoded)
                  .rfind(whole ? "libdeflate + libpng: " : "libpng: ", 0),
              0u);
    for (const char* spec : kSpecs) {
      for (const Case& test : PngCases()) {
        EXPECT_EQ(CompareWithFullDecode(spec, test.encoded, options).second, 0)
            << spec << ", " << test.name << ", whole " << whole;
      }
    }
  }
}

// WebP: libwebp's own scaling (an area average) where it shrinks, against
// the pipeline's resize; the JPEG region path's tolerance (docs/pipeline.md).
TEST(RegionPipelineTest, WebpOutputsFollowFullDecodeWithinTolerance) {
  for (const char* spec : kSpecs) {
    for (const cv::Mat& photo : Photos()) {
      for (int quality : {90, 101}) {  // 101: lossless
        const std::string webp = Encode(photo, ".webp", {cv::IMWRITE_WEBP_QUALITY, quality});
        const auto [mean, worst] = CompareWithFullDecode(spec, webp);
        std::printf("%s, %dx%d, quality %d: mean abs difference %.2f, %.2f at worst\n", spec,
                    photo.cols, photo.rows, quality, mean, worst);
        EXPECT_LT(mean, 3.0) << spec;
        EXPECT_LT(worst, 12.0) << spec;
      }
    }
  }
}

// EXIF-rotated JPEGs: planned upright, decoded as stored, turned: the same
// output as OpenCV's decode (which turns the whole image) for every
// orientation, on an image whose every turn and mirror looks different.
TEST(RegionPipelineTest, EveryExifOrientationFollowsFullDecode) {
  const std::string jpeg = Encode(Pattern(320, 200, 6), ".jpg", {cv::IMWRITE_JPEG_QUALITY, 95});
  for (int orientation = 1; orientation <= 8; ++orientation) {
    const std::string rotated = testing::WithExifOrientation(jpeg, orientation);
    ASSERT_OK_AND_ASSIGN(const std::optional<ImageHeader> header,
                         ReadImageHeader(rotated, 1 << 30));
    ASSERT_TRUE(header.has_value());
    EXPECT_EQ(header->size, orientation >= 5 ? cv::Size(200, 320) : cv::Size(320, 200));
    for (const char* spec : {"decode(exact)|random_resized_crop(96)", "random_resized_crop(224)",
                             "resize(100)|center_crop(96)", "decode(exact)|center_crop(150)"}) {
      const auto [mean, worst] = CompareWithFullDecode(spec, rotated);
      EXPECT_LT(mean, 3.0) << spec << ", orientation " << orientation;
      EXPECT_LT(worst, 12.0) << spec << ", orientation " << orientation;
    }
  }
}

TEST(RegionDecodeSafetyTest, CorruptAndTruncatedFilesAreErrors) {
  ASSERT_OK_AND_ASSIGN(const Pipeline pipeline, Pipeline::Parse("random_resized_crop(32)"));
  std::vector<uint8_t> out(pipeline.output_bytes());
  std::vector<Case> cases = {PngCases()[0], PngCases()[7], WebpCases()[0], WebpCases()[1]};
  for (const Case& test : cases) {
    SCOPED_TRACE(test.name);
    // Truncated anywhere, even below every crop's rows: an error, always.
    for (size_t keep : {size_t{10}, size_t{40}, test.encoded.size() / 2, test.encoded.size() - 13,
                        test.encoded.size() - 1}) {
      for (uint64_t index = 0; index < 4; ++index) {
        const absl::Status status =
            pipeline.Run(test.encoded.substr(0, keep), {0, 0, index}, out.data());
        EXPECT_TRUE(absl::IsInvalidArgument(status)) << keep << ": " << status;
      }
    }
    // Flipped bytes in the data: an error or an image, never a crash.
    for (size_t at = 40; at < test.encoded.size(); at += test.encoded.size() / 23) {
      std::string corrupt = test.encoded;
      corrupt[at] = static_cast<char>(corrupt[at] ^ 0x5A);
      (void)pipeline.Run(corrupt, {}, out.data());
    }
  }
}

// Offsets of the bytes of every IDAT chunk's data in a PNG file.
std::vector<size_t> IdatDataOffsets(const std::string& png) {
  std::vector<size_t> offsets;
  for (const Chunk& chunk : Chunks(png)) {
    if (chunk.type != "IDAT") {
      continue;
    }
    for (size_t i = 0; i < chunk.data.size(); ++i) {
      offsets.push_back(chunk.data_offset + i);
    }
  }
  return offsets;
}

TEST(RegionDecodeSafetyTest, AFlippedBitInAPngsPixelDataIsAnError) {
  // Every row decoded: each IDAT chunk's CRC-32 is checked (and, inflated
  // whole, the stream's Adler-32), so damage anywhere in the compressed
  // pixels is an error on both paths, not a quietly wrong image.
  const cv::Rect everything(0, 0, 203, 157);
  for (const Case& test : {PngCases()[0], PngCases()[3], PngCases()[5]}) {
    SCOPED_TRACE(test.name);
    const std::vector<size_t> offsets = IdatDataOffsets(test.encoded);
    ASSERT_GT(offsets.size(), 100u);
    for (bool whole : {false, true}) {
      for (size_t i = 0; i < offsets.size(); i += offsets.size() / 17) {
        std::string corrupt = test.encoded;
        corrupt[offsets[i]] = static_cast<char>(corrupt[offsets[i]] ^ 0x04);
        ASSERT_OK_AND_ASSIGN(std::optional<ImageHeader> header, ReadImageHeader(corrupt, 1 << 30));
        header->png.inflate_whole = whole;
        cv::Mat out;
        const absl::Status status =
            DecodeRegion(corrupt, *header, {everything, everything.size()}, false, out);
        EXPECT_TRUE(absl::IsInvalidArgument(status))
            << "byte " << offsets[i] << (whole ? ", whole: " : ", by rows: ") << status;
      }
    }
  }
}

TEST(RegionDecodeSafetyTest, PixelLimitComesFromTheHeader) {
  const std::string png = PngCases()[0].encoded;
  const std::string webp = WebpCases()[0].encoded;
  for (const std::string* image : {&png, &webp}) {
    const absl::StatusOr<std::optional<ImageHeader>> header = ReadImageHeader(*image, 1000);
    ASSERT_FALSE(header.ok());
    EXPECT_NE(header.status().message().find("over the limit of 1000 pixels (serve --max-pixels)"),
              std::string::npos)
        << header.status();
  }
  // An animated WebP (its VP8X header says so) is no still image: refused
  // by name.
  std::string animated = std::string("RIFF", 4) + std::string("\x16\0\0\0", 4) + "WEBPVP8X" +
                         std::string("\x0a\0\0\0", 4) + std::string("\x02\0\0\0", 4) +
                         std::string("\x3f\0\0\x3f\0\0", 6);
  const absl::StatusOr<std::optional<ImageHeader>> header = ReadImageHeader(animated, 1 << 30);
  ASSERT_FALSE(header.ok());
  EXPECT_NE(header.status().message().find("animated"), std::string::npos) << header.status();
}

}  // namespace
}  // namespace heterodl
