#include "augment/library_versions.h"

// clang-format off
#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <jpeglib.h>
// clang-format on
#include <libdeflate.h>
#include <png.h>
#include <webp/decode.h>

#include "absl/strings/str_cat.h"
#include "opencv2/core/utility.hpp"

namespace heterodl {
namespace {

// LIBJPEG_TURBO_VERSION is a bare token sequence (2.1.5), not a string.
#define HETERODL_STRINGIFY_VALUE(x) #x
#define HETERODL_STRINGIFY(x) HETERODL_STRINGIFY_VALUE(x)

// libwebp's 0xMMmmrr.
std::string WebpVersion() {
  const int version = WebPGetDecoderVersion();
  return absl::StrCat((version >> 16) & 0xFF, ".", (version >> 8) & 0xFF, ".", version & 0xFF);
}

}  // namespace

std::string DecoderLibraryVersions() {
  return absl::StrCat("OpenCV ", cv::getVersionString(),
                      ", libjpeg-turbo " HETERODL_STRINGIFY(LIBJPEG_TURBO_VERSION) ", libpng ",
                      png_get_libpng_ver(nullptr), ", libdeflate " LIBDEFLATE_VERSION_STRING,
                      ", libwebp ", WebpVersion());
}

}  // namespace heterodl
