#include "augment/webp_decoder.h"

#include <webp/decode.h>

#include "absl/strings/str_cat.h"
#include "augment/image_format.h"
#include "src/common/status_macros.h"

namespace heterodl {
namespace {

absl::string_view StatusName(VP8StatusCode code) {
  switch (code) {
    case VP8_STATUS_OK:
      return "ok";
    case VP8_STATUS_OUT_OF_MEMORY:
      return "out of memory";
    case VP8_STATUS_INVALID_PARAM:
      return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR:
      return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return "unsupported feature";
    case VP8_STATUS_SUSPENDED:
      return "suspended";
    case VP8_STATUS_USER_ABORT:
      return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA:
      return "truncated (not enough data)";
  }
  return "unknown error";
}

const uint8_t* Bytes(absl::string_view data) {
  return reinterpret_cast<const uint8_t*>(data.data());
}

}  // namespace

absl::StatusOr<WebpHeader> ReadWebpHeader(absl::string_view data, int64_t max_pixels) {
  WebPBitstreamFeatures features;
  if (const VP8StatusCode code = WebPGetFeatures(Bytes(data), data.size(), &features);
      code != VP8_STATUS_OK) {
    return absl::InvalidArgumentError(absl::StrCat("corrupt WebP header: ", StatusName(code)));
  }
  if (features.has_animation) {
    return absl::InvalidArgumentError("animated WebP: not a still image");
  }
  if (features.width <= 0 || features.height <= 0) {
    return absl::InvalidArgumentError("WebP header with zero size");
  }
  // The bitstream bounds each side to 16383; the limit is the caller's.
  RETURN_IF_ERROR(CheckClaimedPixels(features.width, features.height, max_pixels));
  WebpHeader header;
  header.width = features.width;
  header.height = features.height;
  return header;
}

absl::Status DecodeWebpRegion(absl::string_view data, const WebpHeader& header,
                              const cv::Rect& region, cv::Size size, cv::Mat& out) {
  if ((region & cv::Rect(0, 0, header.width, header.height)) != region || region.empty() ||
      size.empty()) {
    return absl::InvalidArgumentError("WebP region outside the image");
  }
  // libwebp's RGB output of a lossy image cropped at an odd row or column
  // pairs luma with the wrong chroma samples (measured: mean error 3.7, up
  // to 146), and its chroma upsampling at a crop's edge lacks the neighbours
  // outside it. So the crop starts at even coordinates and, when not scaled,
  // reaches 2 pixels further on every side (within the image), and what it
  // adds is cut off after decoding: the region's pixels are the full
  // decode's. When scaled, what the even start adds is folded into the
  // scaled image (under one source pixel of shift).
  const bool scale = size != region.size();
  cv::Rect crop = region;
  if (!scale) {
    crop = cv::Rect(region.x - 2, region.y - 2, region.width + 4, region.height + 4) &
           cv::Rect(0, 0, header.width, header.height);
  }
  const cv::Rect even(crop.x & ~1, crop.y & ~1, crop.width + (crop.x & 1),
                      crop.height + (crop.y & 1));
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) {
    return absl::InternalError("libwebp version mismatch");
  }
  config.options.use_cropping = 1;
  config.options.crop_left = even.x;
  config.options.crop_top = even.y;
  config.options.crop_width = even.width;
  config.options.crop_height = even.height;
  if (scale) {
    config.options.use_scaling = 1;
    config.options.scaled_width = size.width;
    config.options.scaled_height = size.height;
  }
  cv::Mat decoded;
  if (scale || even == region) {
    out.create(size, CV_8UC3);  // in place when `out` already is that
    decoded = out;
  } else {
    decoded.create(even.size(), CV_8UC3);
  }
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = decoded.data;
  config.output.u.RGBA.stride = static_cast<int>(decoded.step);
  config.output.u.RGBA.size = decoded.step * static_cast<size_t>(decoded.rows);
  const VP8StatusCode code = WebPDecode(Bytes(data), data.size(), &config);
  WebPFreeDecBuffer(&config.output);
  if (code != VP8_STATUS_OK) {
    return absl::InvalidArgumentError(absl::StrCat("corrupt WebP data: ", StatusName(code)));
  }
  if (decoded.data != out.data) {
    out = decoded(cv::Rect(region.x - even.x, region.y - even.y, region.width, region.height));
  }
  return absl::OkStatus();
}

}  // namespace heterodl
