// What kind of image a file holds, from its first bytes and header: how the
// pipeline dispatches to a decoder, and how `bench augment` groups files.
#ifndef HETERODL_AUGMENT_IMAGE_FORMAT_H_
#define HETERODL_AUGMENT_IMAGE_FORMAT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace heterodl {

enum class ImageFormat { kJpeg, kPng, kWebp, kOther };

// By signature: JPEG's SOI marker, PNG's 8-byte signature, RIFF....WEBP.
ImageFormat SniffImageFormat(absl::string_view data);

// A file's kind as users name it, for reports: "baseline JPEG", "grayscale
// JPEG", "progressive JPEG", "CMYK JPEG", "PNG", "WebP", or "other" (also
// for data whose header does not parse).
std::string ImageKindName(absl::string_view data);

// InvalidArgument ("image header claims WxH, over the limit of N pixels
// (serve --max-pixels)")
// when a header's claimed size exceeds `max_pixels`; OK for a width of 0 (no
// size known). Divided, not multiplied: two 32-bit sides overflow a product.
absl::Status CheckClaimedPixels(int64_t width, int64_t height, int64_t max_pixels);

}  // namespace heterodl

#endif  // HETERODL_AUGMENT_IMAGE_FORMAT_H_
