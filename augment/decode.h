// Image decoding for the augment pipeline.
#ifndef HETERODL_AUGMENT_DECODE_H_
#define HETERODL_AUGMENT_DECODE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "opencv2/core/mat.hpp"

namespace heterodl {

struct DecodeOptions {
  // Images whose header claims more pixels than this are refused before any
  // pixel memory is allocated.
  int64_t max_pixels = 100'000'000;
};

// Decodes `encoded` with OpenCV to an 8-bit, 3-channel RGB image, applying
// the EXIF orientation. The general path: any format OpenCV reads (PNG, WebP,
// BMP, TIFF, progressive and CMYK JPEG, ...).
// Returns InvalidArgument naming the problem for empty, truncated, corrupt,
// oversized or unsupported data.
absl::StatusOr<cv::Mat> DecodeImage(absl::string_view encoded, const DecodeOptions& options = {});

}  // namespace heterodl

#endif  // HETERODL_AUGMENT_DECODE_H_
