#include "augment/decode.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "augment/image_format.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"
#include "opencv2/imgproc.hpp"

namespace heterodl {
namespace {

uint32_t BigEndian32(const unsigned char* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}
uint32_t LittleEndian32(const unsigned char* p) {
  return uint32_t{p[3]} << 24 | uint32_t{p[2]} << 16 | uint32_t{p[1]} << 8 | p[0];
}

// The size a PNG or BMP header claims, read before OpenCV allocates for it
// (OpenCV's own limit, 2^30 pixels, still allows 3 GiB per image). Other
// formats rely on that limit and the check after decoding.
absl::Status CheckClaimedSize(absl::string_view data, int64_t max_pixels) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(data.data());
  int64_t width = 0, height = 0;
  if (data.size() >= 24 && SniffImageFormat(data) == ImageFormat::kPng) {
    width = BigEndian32(bytes + 16);
    height = BigEndian32(bytes + 20);
  } else if (data.size() >= 26 && data.substr(0, 2) == "BM") {
    width = static_cast<int32_t>(LittleEndian32(bytes + 18));
    height = static_cast<int32_t>(LittleEndian32(bytes + 22));
    width = width < 0 ? -width : width;
    height = height < 0 ? -height : height;
  }
  // (The product overflowing 64 bits was found by the fuzzer.)
  return CheckClaimedPixels(width, height, max_pixels);
}

}  // namespace

absl::StatusOr<cv::Mat> DecodeImage(absl::string_view encoded, const DecodeOptions& options) {
  if (encoded.empty()) {
    return absl::InvalidArgumentError("empty image file");
  }
  if (absl::Status claimed = CheckClaimedSize(encoded, options.max_pixels); !claimed.ok()) {
    return claimed;
  }
  // imdecode reads from a Mat header over the caller's bytes: no copy.
  const cv::Mat buffer(1, static_cast<int>(encoded.size()), CV_8UC1,
                       const_cast<char*>(encoded.data()));
  cv::Mat image;
  try {
    image = cv::imdecode(buffer, cv::IMREAD_COLOR);
  } catch (const cv::Exception& error) {
    return absl::InvalidArgumentError(absl::StrCat("cannot decode image: ", error.what()));
  }
  if (image.empty()) {
    return absl::InvalidArgumentError(
        "cannot decode image: not a supported image format, or corrupt");
  }
  if (static_cast<int64_t>(image.rows) * image.cols > options.max_pixels) {
    return absl::InvalidArgumentError(absl::StrCat("image is ", image.cols, "x", image.rows,
                                                   ", over the limit of ", options.max_pixels,
                                                   " pixels (serve --max-pixels)"));
  }
  cv::cvtColor(image, image, cv::COLOR_BGR2RGB);
  return image;
}

}  // namespace heterodl
