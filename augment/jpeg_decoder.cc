#include "augment/jpeg_decoder.h"

// clang-format off
#include <cstdio>   // jpeglib.h needs FILE and size_t first
#include <jpeglib.h>
#include <jerror.h>
// clang-format on
#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "augment/image_format.h"

namespace heterodl {
namespace {

// libjpeg's error manager, extended with where to jump on a fatal error.
struct ErrorManager {
  jpeg_error_mgr base;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  // True while the decoder runs over entropy-coded data ScanSkipper jumped
  // past: the warnings that provokes are expected there (and only there).
  bool in_skipped_rows = false;
  // Corrupt-data warnings are errors (JpegDamage::kRefuse), or noted here.
  bool strict = true;
  std::string first_warning;
};

void ErrorExit(j_common_ptr cinfo) {
  ErrorManager* errors = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

// Corrupt-data warnings ("premature end of data segment", "corrupt data"):
// libjpeg decodes on and fills what it could not read (the rest of a scan
// that ends early is flat gray). PIL and torchvision keep such an image, so
// by default so does this decoder, noting the warning; kRefuse makes it an
// error. A file that ends before its end-of-image marker is an error either
// way, as it is for both of them. Stray bytes between markers are harmless
// and common in real photos.
void EmitMessage(j_common_ptr cinfo, int level) {
  if (level >= 0) {
    return;
  }
  auto* errors = reinterpret_cast<ErrorManager*>(cinfo->err);
  const int code = cinfo->err->msg_code;
  if (code == JWRN_EXTRANEOUS_DATA) {
    return;
  }
  if (errors->in_skipped_rows && (code == JWRN_HIT_MARKER || code == JWRN_HUFF_BAD_CODE)) {
    return;
  }
  if (errors->strict || code == JWRN_JPEG_EOF) {
    ErrorExit(cinfo);
  }
  if (errors->first_warning.empty()) {
    char message[JMSG_LENGTH_MAX];
    (*cinfo->err->format_message)(cinfo, message);
    errors->first_warning = message;
  }
}

// Entropy decoding of the rows below a region, skipped in multi-scan files
// (progressive JPEG). libjpeg absorbs every scan of such a file, each over
// the whole image, before it outputs a row: 80% of a progressive decode. Once
// a scan has delivered the iMCU rows the region needs, this progress monitor
// (libjpeg calls it before each iMCU row) moves the input to the next marker,
// where the next scan begins: the entropy decoder then meets that marker,
// warns that data ran out and fills the rest of the scan with zeros, which no
// output row uses. The first 0xFF that is followed by neither 0x00 (a
// stuffed byte), 0xFF (fill) nor a restart code is that marker, by the
// format's byte stuffing; files with restart intervals are left alone.
struct ScanSkipper {
  jpeg_progress_mgr base;
  JDIMENSION needed_imcu_rows = 0;
  int skipped_scan = -1;
};

const JOCTET* NextMarker(const JOCTET* data, size_t size) {
  for (size_t i = 0; i + 1 < size; ++i) {
    if (data[i] != 0xFF) {
      continue;
    }
    const JOCTET code = data[i + 1];
    if (code != 0x00 && code != 0xFF && (code < JPEG_RST0 || code > JPEG_RST0 + 7)) {
      return data + i;
    }
  }
  return nullptr;
}

void SkipRowsBelowRegion(j_common_ptr common) {
  auto* cinfo = reinterpret_cast<j_decompress_ptr>(common);
  auto* skipper = reinterpret_cast<ScanSkipper*>(cinfo->progress);
  auto* errors = reinterpret_cast<ErrorManager*>(cinfo->err);
  errors->in_skipped_rows = skipper->skipped_scan == cinfo->input_scan_number;
  // unread_marker: the scan's data has ended already (an end-of-band run can
  // cover the rest of the image in a few bytes), and the decoder holds the
  // next marker; moving the input would lose that marker's segment.
  if (errors->in_skipped_rows || cinfo->restart_interval != 0 || cinfo->unread_marker != 0 ||
      cinfo->input_iMCU_row < skipper->needed_imcu_rows ||
      cinfo->input_iMCU_row >= cinfo->total_iMCU_rows) {
    return;
  }
  jpeg_source_mgr* source = cinfo->src;
  const JOCTET* marker = NextMarker(source->next_input_byte, source->bytes_in_buffer);
  if (marker == nullptr) {
    return;  // truncated: decode on, and fail as before
  }
  source->bytes_in_buffer -= static_cast<size_t>(marker - source->next_input_byte);
  source->next_input_byte = marker;
  skipper->skipped_scan = cinfo->input_scan_number;
  errors->in_skipped_rows = true;
}

// `errors` as `cinfo`'s error manager, corrupt-data warnings errors or
// noted as `damage` says. Before the caller's setjmp: noting a warning then
// allocates nothing.
void InitErrors(jpeg_decompress_struct& cinfo, ErrorManager& errors, JpegDamage damage) {
  cinfo.err = jpeg_std_error(&errors.base);
  errors.base.error_exit = ErrorExit;
  errors.base.emit_message = EmitMessage;
  errors.message[0] = '\0';
  errors.strict = damage == JpegDamage::kRefuse;
  if (!errors.strict) {
    errors.first_warning.reserve(JMSG_LENGTH_MAX);
  }
}

// A decompressor reading `data` from memory. After the caller's setjmp,
// where libjpeg's errors jump (a helper's own setjmp would be gone by then).
void CreateReading(jpeg_decompress_struct& cinfo, absl::string_view data) {
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(data.data()),
               // NOLINTNEXTLINE(google-runtime-int): jpeg_mem_src's own type
               static_cast<unsigned long>(data.size()));
}

uint16_t Read16(const uint8_t* p, bool little_endian) {
  return little_endian ? static_cast<uint16_t>(p[0] | p[1] << 8)
                       : static_cast<uint16_t>(p[0] << 8 | p[1]);
}
uint32_t Read32(const uint8_t* p, bool little_endian) {
  return little_endian
             ? (uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24)
             : (uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]});
}

// The orientation tag (0x0112) of IFD0 of an APP1 "Exif" segment; 1 when
// absent or unreadable. Every offset is bounds-checked: the data is untrusted.
int ExifOrientation(const jpeg_saved_marker_ptr markers) {
  for (jpeg_saved_marker_ptr marker = markers; marker != nullptr; marker = marker->next) {
    const uint8_t* data = marker->data;
    const size_t size = marker->data_length;
    if (marker->marker != JPEG_APP0 + 1 || size < 14 || std::memcmp(data, "Exif\0\0", 6) != 0) {
      continue;
    }
    const uint8_t* tiff = data + 6;
    const size_t tiff_size = size - 6;
    const bool little = tiff[0] == 'I' && tiff[1] == 'I';
    if (!little && !(tiff[0] == 'M' && tiff[1] == 'M')) {
      continue;
    }
    const uint32_t ifd = Read32(tiff + 4, little);
    if (ifd > tiff_size - 2) {
      continue;
    }
    const uint16_t entries = Read16(tiff + ifd, little);
    for (uint32_t i = 0; i < entries; ++i) {
      const size_t entry = ifd + 2 + size_t{12} * i;
      if (entry + 12 > tiff_size) {
        break;
      }
      if (Read16(tiff + entry, little) == 0x0112) {
        const int orientation = Read16(tiff + entry + 8, little);
        return orientation >= 1 && orientation <= 8 ? orientation : 1;
      }
    }
  }
  return 1;
}

}  // namespace

bool LooksLikeJpeg(absl::string_view data) {
  return data.size() >= 3 && static_cast<uint8_t>(data[0]) == 0xFF &&
         static_cast<uint8_t>(data[1]) == 0xD8 && static_cast<uint8_t>(data[2]) == 0xFF;
}

absl::StatusOr<JpegHeader> ReadJpegHeader(absl::string_view data, int64_t max_pixels) {
  jpeg_decompress_struct cinfo;
  ErrorManager errors;
  InitErrors(cinfo, errors, JpegDamage::kRefuse);
  JpegHeader header;
  if (setjmp(errors.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return absl::InvalidArgumentError(absl::StrCat("corrupt JPEG header: ", errors.message));
  }
  CreateReading(cinfo, data);
  jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xFFFF);
  jpeg_read_header(&cinfo, TRUE);
  header.width = static_cast<int>(cinfo.image_width);
  header.height = static_cast<int>(cinfo.image_height);
  header.components = cinfo.num_components;
  header.progressive = cinfo.progressive_mode != 0;
  header.orientation = ExifOrientation(cinfo.marker_list);
  const bool color_ok =
      cinfo.jpeg_color_space == JCS_YCbCr || cinfo.jpeg_color_space == JCS_GRAYSCALE;
  header.fast_path_ok = color_ok;
  jpeg_destroy_decompress(&cinfo);
  if (header.width <= 0 || header.height <= 0) {
    return absl::InvalidArgumentError("JPEG header with zero size");
  }
  if (absl::Status claimed = CheckClaimedPixels(header.width, header.height, max_pixels);
      !claimed.ok()) {
    return claimed;
  }
  return header;
}

int ChooseScaleEighths(const cv::Rect& region, const cv::Size& output) {
  // Only 1/8, 1/4, 1/2 and 8/8 have SIMD IDCTs in libjpeg-turbo; the other
  // N/8 scales run plain C IDCTs, slower than decoding larger (measured).
  for (int eighths : {1, 2, 4}) {
    if (region.width * eighths / 8 >= output.width &&
        region.height * eighths / 8 >= output.height) {
      return eighths;
    }
  }
  return 8;
}

cv::Size ScaledImageSize(const JpegHeader& header, int eighths) {
  // libjpeg's scaled size: ceil(size * eighths / 8).
  return {static_cast<int>((int64_t{header.width} * eighths + 7) / 8),
          static_cast<int>((int64_t{header.height} * eighths + 7) / 8)};
}

cv::Rect ScaleRect(const cv::Rect& region, int eighths, const JpegHeader& header) {
  const cv::Size scaled = ScaledImageSize(header, eighths);
  const auto scale = [eighths](int v) {
    return static_cast<int>((int64_t{v} * eighths + 4) / 8);  // rounded
  };
  int x0 = std::min(scale(region.x), scaled.width - 1);
  int y0 = std::min(scale(region.y), scaled.height - 1);
  int x1 = std::max(x0 + 1, std::min(scale(region.x + region.width), scaled.width));
  int y1 = std::max(y0 + 1, std::min(scale(region.y + region.height), scaled.height));
  return {x0, y0, x1 - x0, y1 - y0};
}

namespace {

// Has libjpeg read the entropy-coded data of a multi-scan file only down to
// the iMCU row below `scaled_region` (ScanSkipper); leaves a single-scan
// file alone. `skipper` must outlive the decompression.
void SkipScansBelow(jpeg_decompress_struct& cinfo, const cv::Rect& scaled_region, int eighths,
                    ScanSkipper& skipper) {
  if (!jpeg_has_multiple_scans(&cinfo)) {
    return;
  }
  // The region's last row in the stored image, and the iMCU row after the
  // one holding it (chroma upsampling reads one row of context below).
  const int64_t last_row =
      (int64_t{scaled_region.y + scaled_region.height} * 8 + eighths - 1) / eighths - 1;
  const int64_t imcu_height = int64_t{cinfo.max_v_samp_factor} * DCTSIZE;
  skipper.base.progress_monitor = SkipRowsBelowRegion;
  skipper.needed_imcu_rows = static_cast<JDIMENSION>(last_row / imcu_height + 2);
  cinfo.progress = &skipper.base;
}

// The decoder set up for `eighths`/8, RGB out, `mode`'s IDCT and upsampler.
void SetOutput(jpeg_decompress_struct& cinfo, int eighths, JpegDecodeMode mode) {
  cinfo.scale_num = static_cast<unsigned int>(eighths);
  cinfo.scale_denom = 8;
  cinfo.out_color_space = JCS_RGB;
  if (mode == JpegDecodeMode::kFast) {
    cinfo.dct_method = JDCT_IFAST;
    cinfo.do_fancy_upsampling = FALSE;
  }
}

}  // namespace

absl::Status DecodeJpegEntropyOnly(absl::string_view data, int eighths,
                                   const cv::Rect& scaled_region) {
  jpeg_decompress_struct cinfo;
  ErrorManager errors;
  InitErrors(cinfo, errors, JpegDamage::kDecode);
  if (setjmp(errors.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return absl::InvalidArgumentError(absl::StrCat("corrupt JPEG data: ", errors.message));
  }
  CreateReading(cinfo, data);
  jpeg_read_header(&cinfo, TRUE);
  // The merged upsampler needs no context rows, so skipping whole iMCU rows
  // only entropy-decodes them.
  SetOutput(cinfo, eighths, JpegDecodeMode::kFast);
  ScanSkipper skipper;
  SkipScansBelow(cinfo, scaled_region, eighths, skipper);
  // A multi-scan file is entropy-decoded here, every scan of it.
  jpeg_start_decompress(&cinfo);
  if (!jpeg_has_multiple_scans(&cinfo)) {
    const JDIMENSION imcu_rows = static_cast<JDIMENSION>(cinfo.min_DCT_scaled_size) *
                                 static_cast<JDIMENSION>(cinfo.max_v_samp_factor);
    JDIMENSION rows =
        static_cast<JDIMENSION>(scaled_region.y + scaled_region.height) / imcu_rows * imcu_rows;
    // Skipping to the last row returns without decoding anything.
    if (rows >= cinfo.output_height) {
      rows = (cinfo.output_height - 1) / imcu_rows * imcu_rows;
    }
    if (rows > 0) {
      jpeg_skip_scanlines(&cinfo, rows);
    }
  }
  jpeg_abort_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return absl::OkStatus();
}

absl::Status DecodeJpegRegion(absl::string_view data, const JpegHeader& header, int eighths,
                              const cv::Rect& scaled_region, const JpegDecodeOptions& options,
                              cv::Mat& out, std::string* warning) {
  // Everything the decoder touches after setjmp is allocated before it, so a
  // longjmp leaves no C++ object half-updated. libjpeg writes straight into
  // the rows of `decoded`, which is as wide as the whole scaled image (the
  // widest jpeg_crop_scanline can make the region); `out` is then a view of
  // the wanted columns.
  const int scaled_width = ScaledImageSize(header, eighths).width;
  cv::Mat decoded(scaled_region.height, scaled_width, CV_8UC3);
  std::vector<JSAMPROW> rows(static_cast<size_t>(scaled_region.height));
  for (int y = 0; y < scaled_region.height; ++y) {
    rows[y] = decoded.ptr(y);
  }
  JSAMPARRAY const row_pointers = rows.data();
  jpeg_decompress_struct cinfo;
  ErrorManager errors;
  InitErrors(cinfo, errors, options.damage);
  if (setjmp(errors.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return absl::InvalidArgumentError(absl::StrCat("corrupt JPEG data: ", errors.message));
  }
  CreateReading(cinfo, data);
  jpeg_read_header(&cinfo, TRUE);
  SetOutput(cinfo, eighths, options.mode);
  ScanSkipper skipper;
  SkipScansBelow(cinfo, scaled_region, eighths, skipper);
  jpeg_start_decompress(&cinfo);
  if (static_cast<int>(cinfo.output_width) != scaled_width) {
    // The header changed between the two reads: treat as corrupt.
    jpeg_destroy_decompress(&cinfo);
    return absl::InvalidArgumentError("JPEG header changed between reads");
  }
  // jpeg_crop_scanline widens the columns to iMCU boundaries; remember where
  // the wanted columns start within the decoded ones.
  JDIMENSION x_offset = static_cast<JDIMENSION>(scaled_region.x);
  JDIMENSION width = static_cast<JDIMENSION>(scaled_region.width);
  jpeg_crop_scanline(&cinfo, &x_offset, &width);
  const int column = scaled_region.x - static_cast<int>(x_offset);
  if (scaled_region.y > 0) {
    jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(scaled_region.y));
  }
  for (int y = 0; y < scaled_region.height;) {
    // Several rows per call: libjpeg's upsampler produces two at a time, and
    // one row per call makes it buffer and copy.
    const JDIMENSION got = jpeg_read_scanlines(&cinfo, row_pointers + y,
                                               static_cast<JDIMENSION>(scaled_region.height - y));
    if (got == 0) {
      break;  // cannot happen with in-memory data; guards the loop
    }
    y += static_cast<int>(got);
  }
  // The rows below the region are never decoded.
  jpeg_abort_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  out = decoded(cv::Rect(column, 0, scaled_region.width, scaled_region.height));
  if (warning != nullptr && !errors.first_warning.empty()) {
    *warning = absl::StrCat("damaged JPEG data decoded around: ", errors.first_warning);
  }
  return absl::OkStatus();
}

}  // namespace heterodl
