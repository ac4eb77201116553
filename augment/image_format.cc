#include "augment/image_format.h"

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "augment/jpeg_decoder.h"

namespace heterodl {

ImageFormat SniffImageFormat(absl::string_view data) {
  if (LooksLikeJpeg(data)) {
    return ImageFormat::kJpeg;
  }
  if (data.substr(0, 8) == absl::string_view("\x89PNG\r\n\x1a\n", 8)) {
    return ImageFormat::kPng;
  }
  if (data.size() >= 12 && data.substr(0, 4) == "RIFF" && data.substr(8, 4) == "WEBP") {
    return ImageFormat::kWebp;
  }
  return ImageFormat::kOther;
}

std::string ImageKindName(absl::string_view data) {
  switch (SniffImageFormat(data)) {
    case ImageFormat::kJpeg: {
      const absl::StatusOr<JpegHeader> header = ReadJpegHeader(data, int64_t{1} << 40);
      if (!header.ok()) {
        return "other";
      }
      if (header->components == 4) {
        return "CMYK JPEG";
      }
      if (header->progressive) {
        return "progressive JPEG";
      }
      if (header->components == 1) {
        return "grayscale JPEG";
      }
      return "baseline JPEG";
    }
    case ImageFormat::kPng:
      return "PNG";
    case ImageFormat::kWebp:
      return "WebP";
    case ImageFormat::kOther:
      break;
  }
  return "other";
}

absl::Status CheckClaimedPixels(int64_t width, int64_t height, int64_t max_pixels) {
  if (width > 0 && height > max_pixels / width) {
    return absl::InvalidArgumentError(absl::StrCat("image header claims ", width, "x", height,
                                                   ", over the limit of ", max_pixels,
                                                   " pixels (serve --max-pixels)"));
  }
  return absl::OkStatus();
}

}  // namespace heterodl
