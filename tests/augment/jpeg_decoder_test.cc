// The JPEG region decoder's handling of multi-scan (progressive) files: the
// rows below a region are not entropy-decoded, and the region is exactly
// what a decode of every row gives.
#include "augment/jpeg_decoder.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"
#include "tests/testing/status_testing.h"

namespace heterodl {
namespace {

cv::Mat Texture(int width, int height) {
  cv::Mat image(height, width, CV_8UC3);
  cv::RNG rng(7);
  rng.fill(image, cv::RNG::UNIFORM, 0, 256);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      cv::Vec3b& pixel = image.at<cv::Vec3b>(y, x);
      pixel[0] = static_cast<uint8_t>((pixel[0] + x * 2) / 2);
      pixel[1] = static_cast<uint8_t>((pixel[1] + y * 3) / 2);
    }
  }
  return image;
}

std::string Progressive(const cv::Mat& image) {
  std::vector<uint8_t> encoded;
  EXPECT_TRUE(cv::imencode(".jpg", image, encoded,
                           {cv::IMWRITE_JPEG_QUALITY, 90, cv::IMWRITE_JPEG_PROGRESSIVE, 1}));
  return std::string(encoded.begin(), encoded.end());
}

// `jpeg` with the last `fraction` of every scan's entropy-coded data (of
// scans longer than 200 bytes) overwritten by stuffed 0xFF bytes, which no
// Huffman table decodes: a decoder that reads those bytes reports corrupt
// data. Returns how many scans were overwritten.
int OverwriteScanTails(std::string& jpeg, double fraction) {
  auto byte = [&jpeg](size_t i) { return static_cast<uint8_t>(jpeg[i]); };
  int overwritten = 0;
  size_t at = 2;  // after SOI
  while (at + 4 <= jpeg.size() && byte(at) == 0xFF) {
    const uint8_t marker = byte(at + 1);
    if (marker == 0xD9) {
      break;
    }
    const size_t length = size_t{byte(at + 2)} << 8 | byte(at + 3);
    at += 2 + length;
    if (marker != 0xDA) {
      continue;
    }
    size_t end = at;  // the next marker ends the scan's data
    while (end + 1 < jpeg.size() &&
           !(byte(end) == 0xFF && byte(end + 1) != 0x00 && (byte(end + 1) & 0xF8) != 0xD0)) {
      ++end;
    }
    if (end - at > 200) {
      for (size_t i = at + static_cast<size_t>((end - at) * (1 - fraction)) & ~size_t{1};
           i + 1 < end; i += 2) {
        jpeg[i] = static_cast<char>(0xFF);
        jpeg[i + 1] = 0x00;
      }
      ++overwritten;
    }
    at = end;
  }
  return overwritten;
}

// The exact decode, with damage an error: what these tests compare against.
const JpegDecodeOptions kExactStrict{JpegDecodeMode::kExact, JpegDamage::kRefuse};

TEST(JpegDecoderTest, ProgressiveRowsBelowTheRegionAreNeverRead) {
  const cv::Mat image = Texture(480, 360);
  const std::string intact = Progressive(image);
  std::string damaged = intact;
  ASSERT_GE(OverwriteScanTails(damaged, 0.4), 3);
  ASSERT_OK_AND_ASSIGN(const JpegHeader header, ReadJpegHeader(intact, 1 << 30));
  ASSERT_TRUE(header.progressive);

  for (int eighths : {8, 2}) {
    SCOPED_TRACE(eighths);
    const cv::Size scaled = ScaledImageSize(header, eighths);
    const cv::Rect all(0, 0, scaled.width, scaled.height);
    cv::Mat reference;
    ASSERT_OK(DecodeJpegRegion(intact, header, eighths, all, kExactStrict, reference));
    // The damage is real: a decode of every row meets it.
    cv::Mat whole;
    EXPECT_TRUE(absl::IsInvalidArgument(
        DecodeJpegRegion(damaged, header, eighths, all, kExactStrict, whole)));
    // A band in the top rows never reads it, and is exact. (Full width: a
    // column crop changes chroma upsampling at its edges, which the
    // pipeline's tolerance test covers.)
    for (const cv::Rect& region :
         {cv::Rect(0, 0, scaled.width, scaled.height / 8),
          cv::Rect(0, scaled.height / 10, scaled.width, scaled.height / 6)}) {
      SCOPED_TRACE(::testing::Message() << region);
      cv::Mat decoded;
      std::string warning;
      ASSERT_OK(
          DecodeJpegRegion(damaged, header, eighths, region, kExactStrict, decoded, &warning));
      EXPECT_EQ(warning, "");
      EXPECT_EQ(cv::norm(decoded, reference(region), cv::NORM_INF), 0);
      ASSERT_OK(DecodeJpegRegion(intact, header, eighths, region, kExactStrict, decoded));
      EXPECT_EQ(cv::norm(decoded, reference(region), cv::NORM_INF), 0);
    }
  }
}

// The floor `bench augment` measures: the entropy-coded data down to the
// region's rows, and no further. A file cut below those rows is never read
// that far; cut above them, it is an error, as the region decode is.
TEST(JpegDecoderTest, EntropyOnlyDecodeReadsDownToTheRegionsRowsAndNoFurther) {
  std::vector<uint8_t> encoded;
  ASSERT_TRUE(cv::imencode(".jpg", Texture(480, 360), encoded, {cv::IMWRITE_JPEG_QUALITY, 90}));
  const std::string intact(encoded.begin(), encoded.end());
  const std::string cut = intact.substr(0, intact.size() * 6 / 10);
  ASSERT_OK_AND_ASSIGN(const JpegHeader header, ReadJpegHeader(intact, 1 << 30));
  ASSERT_FALSE(header.progressive);
  for (int eighths : {8, 2}) {
    SCOPED_TRACE(eighths);
    const cv::Size scaled = ScaledImageSize(header, eighths);
    const cv::Rect top(scaled.width / 4, 0, scaled.width / 2, scaled.height / 4);
    const cv::Rect bottom(0, scaled.height * 3 / 4, scaled.width, scaled.height / 4);
    EXPECT_OK(DecodeJpegEntropyOnly(intact, eighths, top));
    EXPECT_OK(DecodeJpegEntropyOnly(intact, eighths, bottom));
    EXPECT_OK(DecodeJpegEntropyOnly(cut, eighths, top));
    EXPECT_TRUE(absl::IsInvalidArgument(DecodeJpegEntropyOnly(cut, eighths, bottom)));
    cv::Mat decoded;
    EXPECT_TRUE(absl::IsInvalidArgument(
        DecodeJpegRegion(cut, header, eighths, bottom, kExactStrict, decoded)));
  }
  // Progressive: every scan is read (down to the region's rows), so a cut
  // anywhere before the last scan is an error even for the top rows.
  const std::string progressive = Progressive(Texture(480, 360));
  const cv::Rect top(0, 0, 480, 32);
  EXPECT_OK(DecodeJpegEntropyOnly(progressive, 8, top));
  EXPECT_TRUE(absl::IsInvalidArgument(
      DecodeJpegEntropyOnly(progressive.substr(0, progressive.size() / 2), 8, top)));
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeJpegEntropyOnly("\xFF\xD8\xFF garbage", 8, top)));
}

TEST(JpegDecoderTest, TruncatedProgressiveFilesAreStillErrors) {
  // A file cut short is an error whatever the damage policy: PIL and
  // torchvision refuse it too.
  const std::string intact = Progressive(Texture(320, 240));
  ASSERT_OK_AND_ASSIGN(const JpegHeader header, ReadJpegHeader(intact, 1 << 30));
  const cv::Rect top(0, 0, 320, 16);
  for (const JpegDamage damage : {JpegDamage::kRefuse, JpegDamage::kDecode}) {
    for (size_t keep : {intact.size() / 3, intact.size() / 2, intact.size() - 3}) {
      cv::Mat decoded;
      EXPECT_TRUE(absl::IsInvalidArgument(DecodeJpegRegion(
          intact.substr(0, keep), header, 8, top, {JpegDecodeMode::kExact, damage}, decoded)))
          << keep;
    }
  }
}

// `jpeg`'s first scan cut at `fraction` of its entropy-coded data and the
// file ended there with an end-of-image marker: "premature end of data
// segment", the damage found in held-out photos.
std::string EndScanEarly(const std::string& jpeg, double fraction) {
  size_t at = 2;
  while (at + 4 <= jpeg.size()) {
    const auto marker = static_cast<uint8_t>(jpeg[at + 1]);
    const size_t length =
        size_t{static_cast<uint8_t>(jpeg[at + 2])} << 8 | static_cast<uint8_t>(jpeg[at + 3]);
    at += 2 + length;
    if (marker == 0xDA) {
      break;
    }
  }
  const size_t cut = at + static_cast<size_t>((jpeg.size() - at) * fraction);
  return jpeg.substr(0, cut) + "\xFF\xD9";
}

TEST(JpegDecoderTest, AScanThatEndsEarlyIsDecodedWithAWarningUnlessRefused) {
  const cv::Mat image = Texture(320, 240);
  std::vector<uint8_t> encoded;
  ASSERT_TRUE(cv::imencode(".jpg", image, encoded, {cv::IMWRITE_JPEG_QUALITY, 90}));
  const std::string intact(encoded.begin(), encoded.end());
  const std::string damaged = EndScanEarly(intact, 0.5);
  ASSERT_OK_AND_ASSIGN(const JpegHeader header, ReadJpegHeader(damaged, 1 << 30));
  const cv::Rect all(0, 0, 320, 240);
  cv::Mat decoded;
  std::string warning;
  EXPECT_TRUE(absl::IsInvalidArgument(
      DecodeJpegRegion(damaged, header, 8, all, kExactStrict, decoded, &warning)));
  EXPECT_EQ(warning, "");
  ASSERT_OK(DecodeJpegRegion(damaged, header, 8, all, {JpegDecodeMode::kExact}, decoded, &warning));
  EXPECT_NE(warning.find("premature end of data segment"), std::string::npos) << warning;
  // The top rows are the image's; the rows the scan never reached are
  // libjpeg's fill (flat: every pixel the same), as PIL shows them.
  cv::Mat reference;
  ASSERT_OK(DecodeJpegRegion(intact, header, 8, all, kExactStrict, reference));
  EXPECT_EQ(cv::norm(decoded.rowRange(0, 16), reference.rowRange(0, 16), cv::NORM_INF), 0);
  const cv::Mat bottom = decoded.rowRange(224, 240).clone();
  double low = 0, high = 0;
  cv::minMaxLoc(bottom.reshape(1), &low, &high);
  EXPECT_EQ(low, high);
  // An intact file says nothing.
  warning.clear();
  ASSERT_OK(DecodeJpegRegion(intact, header, 8, all, {JpegDecodeMode::kExact}, decoded, &warning));
  EXPECT_EQ(warning, "");
}

}  // namespace
}  // namespace heterodl
