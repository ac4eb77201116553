#include "augment/region_decode.h"

#include "src/common/status_macros.h"

namespace heterodl {

absl::StatusOr<std::optional<ImageHeader>> ReadImageHeader(absl::string_view data,
                                                           int64_t max_pixels) {
  ImageHeader header;
  header.format = SniffImageFormat(data);
  switch (header.format) {
    case ImageFormat::kJpeg: {
      ASSIGN_OR_RETURN(header.jpeg, ReadJpegHeader(data, max_pixels));
      if (!header.jpeg.fast_path_ok) return std::nullopt;
      header.size = {header.jpeg.width, header.jpeg.height};
      return header;
    }
    case ImageFormat::kPng: {
      ASSIGN_OR_RETURN(header.png, ReadPngHeader(data, max_pixels));
      header.size = {header.png.width, header.png.height};
      return header;
    }
    case ImageFormat::kWebp: {
      ASSIGN_OR_RETURN(header.webp, ReadWebpHeader(data, max_pixels));
      header.size = {header.webp.width, header.webp.height};
      return header;
    }
    case ImageFormat::kOther:
      break;
  }
  return std::nullopt;
}

absl::Status DecodeRegion(absl::string_view data, const ImageHeader& header,
                          const RegionRequest& request, bool exact, cv::Mat& out) {
  switch (header.format) {
    case ImageFormat::kJpeg: {
      const int eighths = ChooseScaleEighths(request.region, request.output);
      return DecodeJpegRegion(data, header.jpeg, eighths,
                              ScaleRect(request.region, eighths, header.jpeg),
                              exact ? JpegDecodeMode::kExact : JpegDecodeMode::kFast, out);
    }
    case ImageFormat::kPng:
      return DecodePngRegion(data, header.png, request.region, out);
    case ImageFormat::kWebp: {
      // Shrunk inside the decoder (an area average) as far as the
      // pipeline's resize would halve it (a 2:1 box filter), so the same
      // bilinear step finishes both; an enlargement is left to the resize.
      const bool shrink = request.region.width >= request.output.width &&
                          request.region.height >= request.output.height;
      return DecodeWebpRegion(
          data, header.webp, request.region,
          shrink ? HalvedSize(request.region.size(), request.output) : request.region.size(), out);
    }
    case ImageFormat::kOther:
      break;
  }
  return absl::InternalError("no region decoder for this format");
}

std::string RegionDecodePath(const ImageHeader& header, bool whole_image) {
  switch (header.format) {
    case ImageFormat::kJpeg:
      if (whole_image) return "libjpeg-turbo: whole image";
      return header.jpeg.progressive ? "libjpeg-turbo: all scans, then region at DCT scale"
                                     : "libjpeg-turbo: region at DCT scale";
    case ImageFormat::kPng:
      if (whole_image || header.png.interlaced) return "libpng: whole image";
      return "libpng: rows down to the region's last";
    case ImageFormat::kWebp:
      return whole_image ? "libwebp: whole image" : "libwebp: region, scaled in the decoder";
    case ImageFormat::kOther:
      break;
  }
  return "OpenCV: whole image";
}

}  // namespace heterodl
