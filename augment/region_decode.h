// Decoding only what the first crop or resize of a pipeline needs, for every
// format with a decoder that can: baseline and progressive JPEG (libjpeg-turbo:
// rows and iMCU columns of the region, DCT-domain scaling), PNG (libpng: rows
// down to the region's last) and WebP (libwebp: cropping and scaling inside
// the decoder). Other files, and JPEGs these paths do not cover (CMYK,
// YCCK), are decoded whole by OpenCV (decode.h). A JPEG's EXIF orientation is
// applied, as OpenCV does: the region is planned on the upright image,
// decoded where it lies in the stored one, then turned upright.
//
//   ASSIGN_OR_RETURN(std::optional<ImageHeader> header, ReadImageHeader(bytes, max_pixels));
//   if (header) {
//     RegionRequest request = ...;  // planned on header->size
//     cv::Mat region;
//     RETURN_IF_ERROR(DecodeRegion(bytes, *header, request, /*exact=*/false, region));
//   }
#ifndef HETERODL_AUGMENT_REGION_DECODE_H_
#define HETERODL_AUGMENT_REGION_DECODE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "augment/image_format.h"
#include "augment/jpeg_decoder.h"
#include "augment/png_decoder.h"
#include "augment/transforms.h"
#include "augment/webp_decoder.h"
#include "opencv2/core/mat.hpp"

namespace heterodl {

// A header read by one of the region decoders.
struct ImageHeader {
  ImageFormat format = ImageFormat::kOther;
  cv::Size size;    // upright: a JPEG's EXIF orientation applied
  JpegHeader jpeg;  // set for kJpeg
  PngHeader png;    // set for kPng
  WebpHeader webp;  // set for kWebp
};

// The header, when a region decoder handles the file; nullopt when OpenCV
// must decode it. InvalidArgument for a corrupt header or one claiming more
// than `max_pixels`, before any pixel memory is allocated.
absl::StatusOr<std::optional<ImageHeader>> ReadImageHeader(absl::string_view data,
                                                           int64_t max_pixels);

// Decodes `request.region` (full-resolution coordinates, inside the image)
// at a size between the region's and `request.output` (never smaller than
// the output): RGB, CV_8UC3. When `out` already has the decoded size and
// type, the decoder may write into it in place. `exact`: libjpeg's accurate
// IDCT and fancy upsampling, as PIL decodes; otherwise its fast variants
// (docs/pipeline.md gives the differences). PNG and WebP decode one way.
// `damage`: what a JPEG's damaged but decodable data does (jpeg_decoder.h);
// damage decoded around sets `*warning` when not null.
absl::Status DecodeRegion(absl::string_view data, const ImageHeader& header,
                          const RegionRequest& request, bool exact, cv::Mat& out,
                          JpegDamage damage = JpegDamage::kDecode, std::string* warning = nullptr);

// The least of DecodeRegion's work for this request that no region decoder
// avoids (jpeg_decoder.h's DecodeJpegEntropyOnly), done and thrown away:
// what `bench augment` reports as each JPEG's floor. Unimplemented for PNG
// and WebP, whose decoders interleave that work with the rest (inflate and
// unfilter, VP8 prediction): their whole decode is their floor.
absl::Status DecodeRegionEntropyOnly(absl::string_view data, const ImageHeader& header,
                                     const RegionRequest& request);

// How DecodeRegion decodes a file with this header (for reports): a region,
// or with `whole_image` the whole image (a pipeline not starting with a crop
// or resize).
std::string RegionDecodePath(const ImageHeader& header, bool whole_image);

}  // namespace heterodl

#endif  // HETERODL_AUGMENT_REGION_DECODE_H_
