// PNG decoding on libpng, row by row, stopping after the last row a crop
// needs. (libspng, measured against it on the same files, was slower: see
// docs/pipeline.md.)
//
// PNG rows are filtered against the row above and deflated as one stream,
// so every row down to the region's last must be unfiltered; the rows below
// it never are, and only the region's rows are kept. Interlaced (Adam7)
// files are decoded whole: their passes spread each row over the whole
// stream.
//
// The deflate stream itself is inflated whole by libdeflate, three times
// faster than zlib inflating it a row at a time inside libpng (which
// spends a fifth of each row in zlib's slow path); libpng then reads the
// inflated rows as stored (uncompressed) deflate blocks and does everything
// else (filters, palettes, conversions) as before. Interlaced files, and
// images whose inflated data would pass kMaxWholeInflateBytes, are
// inflated by libpng itself.
//
//   ASSIGN_OR_RETURN(PngHeader header, ReadPngHeader(bytes, max_pixels));
//   cv::Mat rgb;
//   RETURN_IF_ERROR(DecodePngRegion(bytes, header, crop, rgb));
//
// Every colour type and bit depth decodes to 8-bit RGB: palettes expanded,
// alpha dropped (as PIL's convert("RGB") and OpenCV's IMREAD_COLOR do), 16
// bits to their high byte, no gamma correction.
#ifndef HETERODL_AUGMENT_PNG_DECODER_H_
#define HETERODL_AUGMENT_PNG_DECODER_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "opencv2/core/mat.hpp"

namespace heterodl {

struct PngHeader {
  int width = 0;
  int height = 0;
  bool interlaced = false;
  // Where the first IDAT chunk starts, and the bytes of one row as stored
  // (before conversion, without its filter byte).
  size_t pixel_data_offset = 0;
  size_t stored_row_bytes = 0;
  // Whether DecodePngRegion inflates the pixel data whole (libdeflate)
  // rather than through libpng: set by ReadPngHeader; both paths give the
  // same pixels.
  bool inflate_whole = false;
};

// The largest inflated pixel data that is inflated whole: beyond it (a
// 44-megapixel RGB photo), memory for every row at once outweighs speed.
inline constexpr size_t kMaxWholeInflateBytes = size_t{128} << 20;

// Parses the signature and IHDR. InvalidArgument for a corrupt header, or
// dimensions over `max_pixels`, before any pixel memory exists.
absl::StatusOr<PngHeader> ReadPngHeader(absl::string_view data, int64_t max_pixels);

// Decodes `region` (clamped to the image by the caller) into `out`: RGB,
// CV_8UC3, of the region's size (a view into a buffer of full rows).
// `header` must be ReadPngHeader's for the same `data`, whose critical
// chunks before the pixel data it checked. InvalidArgument for corrupt or
// truncated data, with libpng's or libdeflate's account of it; when
// inflating whole, damage anywhere in the pixel data is an error, even
// below the region.
absl::Status DecodePngRegion(absl::string_view data, const PngHeader& header,
                             const cv::Rect& region, cv::Mat& out);

// Decodes a segmentation mask: one class id per pixel, as the file stores
// it. 8-bit gray (and 1, 2, 4-bit gray, unscaled) and palette images give
// CV_8UC1 (a palette's indices, not its colours: PIL's mode "P", as
// torchvision's segmentation references read VOC); 16-bit gray gives
// CV_16UC1. InvalidArgument for a colour or alpha image (not class ids),
// corrupt or truncated data, or dimensions over `max_pixels`.
absl::StatusOr<cv::Mat> DecodePngMask(absl::string_view data, int64_t max_pixels);

}  // namespace heterodl

#endif  // HETERODL_AUGMENT_PNG_DECODER_H_
