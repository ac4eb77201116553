#include "augment/region_decode.h"

#include <utility>

#include "opencv2/core.hpp"
#include "src/common/status_macros.h"

namespace heterodl {
namespace {

// Where `upright` (a rect of the image shown with EXIF `orientation`
// applied, of size `upright_size`) lies in the image as stored. Orientations
// 5-8 swap the axes.
cv::Rect StoredRect(const cv::Rect& upright, int orientation, cv::Size upright_size) {
  const int x0 = upright.x, x1 = upright.x + upright.width;
  const int y0 = upright.y, y1 = upright.y + upright.height;
  const int w = upright_size.width, h = upright_size.height;  // upright
  switch (orientation) {
    case 2:  // mirrored left-right
      return {w - x1, y0, x1 - x0, y1 - y0};
    case 3:  // turned 180
      return {w - x1, h - y1, x1 - x0, y1 - y0};
    case 4:  // mirrored top-bottom
      return {x0, h - y1, x1 - x0, y1 - y0};
    case 5:  // transposed
      return {y0, x0, y1 - y0, x1 - x0};
    case 6:  // stored turned 90 counter-clockwise: shown turned clockwise
      return {y0, w - x1, y1 - y0, x1 - x0};
    case 7:  // transverse
      return {h - y1, w - x1, y1 - y0, x1 - x0};
    case 8:  // stored turned 90 clockwise
      return {h - y1, x0, y1 - y0, x1 - x0};
    default:
      return upright;
  }
}

// `stored` (a region as stored) turned as EXIF `orientation` says; with no
// turn (1), `upright` shares its pixels.
void TurnUpright(const cv::Mat& stored, int orientation, cv::Mat& upright) {
  switch (orientation) {
    case 2:
      cv::flip(stored, upright, 1);
      return;
    case 3:
      cv::rotate(stored, upright, cv::ROTATE_180);
      return;
    case 4:
      cv::flip(stored, upright, 0);
      return;
    case 5:
      cv::transpose(stored, upright);
      return;
    case 6:
      cv::rotate(stored, upright, cv::ROTATE_90_CLOCKWISE);
      return;
    case 7: {
      cv::Mat transposed;
      cv::transpose(stored, transposed);
      cv::flip(transposed, upright, -1);
      return;
    }
    case 8:
      cv::rotate(stored, upright, cv::ROTATE_90_COUNTERCLOCKWISE);
      return;
    default:
      upright = stored;
  }
}

}  // namespace

absl::StatusOr<std::optional<ImageHeader>> ReadImageHeader(absl::string_view data,
                                                           int64_t max_pixels) {
  ImageHeader header;
  header.format = SniffImageFormat(data);
  switch (header.format) {
    case ImageFormat::kJpeg: {
      ASSIGN_OR_RETURN(header.jpeg, ReadJpegHeader(data, max_pixels));
      if (!header.jpeg.fast_path_ok) {
        return std::nullopt;
      }
      header.size = {header.jpeg.width, header.jpeg.height};
      if (header.jpeg.orientation >= 5) {
        std::swap(header.size.width, header.size.height);
      }
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

namespace {

// Where a JPEG region request lies in the image as stored, and at which
// DCT scale it is decoded.
struct StoredJpegRegion {
  int eighths = 8;
  cv::Rect scaled;  // the region in the stored image decoded at eighths/8
};

StoredJpegRegion PlanStoredJpegRegion(const ImageHeader& header, const RegionRequest& request) {
  const int orientation = header.jpeg.orientation;
  const cv::Rect stored = StoredRect(request.region, orientation, header.size);
  cv::Size output = request.output;
  if (orientation >= 5) {
    std::swap(output.width, output.height);
  }
  const int eighths = ChooseScaleEighths(stored, output);
  return {eighths, ScaleRect(stored, eighths, header.jpeg)};
}

}  // namespace

absl::Status DecodeRegion(absl::string_view data, const ImageHeader& header,
                          const RegionRequest& request, bool exact, cv::Mat& out, JpegDamage damage,
                          std::string* warning) {
  switch (header.format) {
    case ImageFormat::kJpeg: {
      const StoredJpegRegion stored = PlanStoredJpegRegion(header, request);
      cv::Mat as_stored;
      const JpegDecodeOptions options{exact ? JpegDecodeMode::kExact : JpegDecodeMode::kFast,
                                      damage};
      RETURN_IF_ERROR(DecodeJpegRegion(data, header.jpeg, stored.eighths, stored.scaled, options,
                                       as_stored, warning));
      TurnUpright(as_stored, header.jpeg.orientation, out);
      return absl::OkStatus();
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

absl::Status DecodeRegionEntropyOnly(absl::string_view data, const ImageHeader& header,
                                     const RegionRequest& request) {
  if (header.format != ImageFormat::kJpeg) {
    return absl::UnimplementedError("only JPEG's entropy decoding runs on its own");
  }
  const StoredJpegRegion stored = PlanStoredJpegRegion(header, request);
  return DecodeJpegEntropyOnly(data, stored.eighths, stored.scaled);
}

std::string RegionDecodePath(const ImageHeader& header, bool whole_image) {
  switch (header.format) {
    case ImageFormat::kJpeg:
      if (whole_image) {
        return "libjpeg-turbo: whole image";
      }
      return header.jpeg.progressive ? "libjpeg-turbo: scans to the region's rows, at DCT scale"
                                     : "libjpeg-turbo: region at DCT scale";
    case ImageFormat::kPng: {
      const std::string rows =
          whole_image || header.png.interlaced ? "whole image" : "rows down to the region's last";
      return (header.png.inflate_whole ? "libdeflate + libpng: " : "libpng: ") + rows;
    }
    case ImageFormat::kWebp:
      return whole_image ? "libwebp: whole image" : "libwebp: region, scaled in the decoder";
    case ImageFormat::kOther:
      break;
  }
  return "OpenCV: whole image";
}

}  // namespace heterodl
