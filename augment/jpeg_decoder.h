// Region-of-interest JPEG decoding on libjpeg-turbo.
//
// A random crop of a photo needs only part of the image, and usually at a
// fraction of its resolution. This decoder reads the header, and then decodes
// just the rows and iMCU columns of a region, with the IDCT scaling the image
// by 1/2, 1/4 or 1/8 on the way (libjpeg-turbo's SIMD scaled IDCTs) — so a small crop of a large
// photo costs a fraction of a full decode (Huffman decoding of the skipped rows above the region
// remains; entropy-coded data has no row index). In multi-scan (progressive) files, which libjpeg
// absorbs whole before output, each scan's rows below the region are not entropy-decoded either.
//
//   ASSIGN_OR_RETURN(JpegHeader header, ReadJpegHeader(bytes, max_pixels));
//   if (header.fast_path_ok) {
//     const int eighths = ChooseScaleEighths(crop, output_size);
//     cv::Rect scaled = ScaleRect(crop, eighths, header);
//     cv::Mat rgb;
//     RETURN_IF_ERROR(DecodeJpegRegion(bytes, header, eighths, scaled, {}, rgb));
//   }
//
// libjpeg reports errors by calling error_exit, whose default ends the
// process; here it jumps back and the error becomes a Status.
#ifndef HETERODL_AUGMENT_JPEG_DECODER_H_
#define HETERODL_AUGMENT_JPEG_DECODER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "opencv2/core/mat.hpp"

namespace heterodl {

// kExact: libjpeg's accurate integer IDCT and fancy (triangle) chroma
// upsampling, libjpeg's defaults and what PIL uses. kFast: the fast integer
// IDCT and the merged upsampler; ~12% faster per image, mean difference
// ~1.3/255 per channel value (docs/pipeline.md).
enum class JpegDecodeMode { kFast, kExact };

// Entropy-coded data that is damaged but decodable (a scan that ends early,
// a bad Huffman code): kDecode keeps the image as libjpeg fills it, as PIL
// and torchvision.io do, and reports the damage; kRefuse makes it an error
// (serve --strict-decode). A file cut short before its end marker is an
// error under both, as it is for PIL and torchvision.
enum class JpegDamage { kDecode, kRefuse };

struct JpegDecodeOptions {
  JpegDecodeMode mode = JpegDecodeMode::kFast;
  JpegDamage damage = JpegDamage::kDecode;
};

struct JpegHeader {
  int width = 0;
  int height = 0;
  int components = 0;
  bool progressive = false;
  // EXIF orientation tag (1 = as stored), 1 when absent.
  int orientation = 1;
  // 1 or 3 components (grayscale or YCbCr), baseline or progressive: what
  // the region decoder handles (an EXIF orientation is applied by
  // region_decode.h). CMYK and YCCK go through OpenCV.
  bool fast_path_ok = false;
};

// True when `data` starts with a JPEG SOI marker.
bool LooksLikeJpeg(absl::string_view data);

// Parses the header (and EXIF orientation). InvalidArgument for a corrupt
// header, or dimensions over `max_pixels`, before any pixel memory exists.
absl::StatusOr<JpegHeader> ReadJpegHeader(absl::string_view data, int64_t max_pixels);

// The smallest scale of 1/8, 1/4, 1/2 and 1 (returned as 1, 2, 4 or 8
// eighths) at which `region`, shrunk, still covers `output` in both
// dimensions: the resize after decoding never enlarges, and the IDCT, colour
// conversion and resize do the least work.
int ChooseScaleEighths(const cv::Rect& region, const cv::Size& output);

// The image's size when decoded at `eighths`/8: ceil(size * eighths / 8).
cv::Size ScaledImageSize(const JpegHeader& header, int eighths);

// `region` (full-resolution coordinates) in the coordinates of the image
// decoded at `eighths`/8, rounded, clamped to it and at least 1x1.
cv::Rect ScaleRect(const cv::Rect& region, int eighths, const JpegHeader& header);

// Decodes `scaled_region` of the image scaled by `eighths`/8 into `out`
// (RGB, CV_8UC3, of scaled_region's size; a view into a wider buffer).
// InvalidArgument with libjpeg's message for corrupt or truncated data that
// `options.damage` does not let through; damage let through sets `*warning`
// (when not null) to what libjpeg said first, and leaves it alone otherwise.
absl::Status DecodeJpegRegion(absl::string_view data, const JpegHeader& header, int eighths,
                              const cv::Rect& scaled_region, const JpegDecodeOptions& options,
                              cv::Mat& out, std::string* warning = nullptr);

// The part of DecodeJpegRegion no region decoder can shrink: the
// entropy-coded (Huffman) data of every whole iMCU row above the region's
// last row, at full image width (the format has no column index), or in a
// progressive file every scan down to those rows, decoded and thrown away:
// no IDCT, upsampling or colour conversion. The floor `bench augment`
// measures a region decode against; slightly under what DecodeJpegRegion
// must read (it stops at the last whole iMCU row). InvalidArgument for data
// libjpeg cannot read.
absl::Status DecodeJpegEntropyOnly(absl::string_view data, int eighths,
                                   const cv::Rect& scaled_region);

}  // namespace heterodl

#endif  // HETERODL_AUGMENT_JPEG_DECODER_H_
