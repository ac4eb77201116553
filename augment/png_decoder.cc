#include "augment/png_decoder.h"

// clang-format off
#include <png.h>
// clang-format on
#include <csetjmp>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "augment/image_format.h"
#include "src/common/status_macros.h"

namespace heterodl {
namespace {

// Where libpng reads from, and what it reported before giving up.
struct Source {
  absl::string_view data;
  size_t position = 0;
  char message[200] = "";
};

void ReadBytes(png_structp png, png_bytep out, png_size_t length) {
  auto* source = static_cast<Source*>(png_get_io_ptr(png));
  if (length > source->data.size() - source->position) png_error(png, "truncated data");
  std::memcpy(out, source->data.data() + source->position, length);
  source->position += length;
}

// libpng reports errors by calling this, which must not return: it records
// the message and jumps back to the setjmp of the call in progress, where
// the error becomes a Status.
void OnError(png_structp png, png_const_charp message) {
  auto* source = static_cast<Source*>(png_get_error_ptr(png));
  std::snprintf(source->message, sizeof(source->message), "%s", message);
  png_longjmp(png, 1);
}
void OnWarning(png_structp, png_const_charp) {}

// What one image may make libpng hold besides its pixels (text, ICC and
// unknown chunks): its own default is 8 MB per chunk.
constexpr png_alloc_size_t kMaxChunkBytes = 16 << 20;

// libpng stops reading where the last row ends, so a file cut off after its
// pixel data (or, for a crop, after the rows it needs) would decode fine one
// epoch and fail another. Every PNG ends with an IEND chunk (some carry junk
// after it): its absence is what truncation looks like.
bool HasEnd(absl::string_view data) {
  const size_t tail = data.size() > 1024 ? data.size() - 1024 : 0;
  const size_t at = data.rfind("IEND");
  return at != absl::string_view::npos && at >= tail && at >= 4 && at + 8 <= data.size() &&
         data.substr(at - 4, 4) == absl::string_view("\0\0\0\0", 4);
}

// A libpng read struct over `source`; destroyed with its info struct.
class Reader {
 public:
  explicit Reader(Source& source) {
    png_ = png_create_read_struct(PNG_LIBPNG_VER_STRING, &source, OnError, OnWarning);
    if (png_ != nullptr) info_ = png_create_info_struct(png_);
    if (info_ != nullptr) {
      png_set_read_fn(png_, &source, ReadBytes);
      png_set_chunk_malloc_max(png_, kMaxChunkBytes);
      // libpng's own per-side limit (a million) lifted to its format's: the
      // caller's pixel limit is what bounds an image.
      png_set_user_limits(png_, PNG_UINT_31_MAX, PNG_UINT_31_MAX);
      // The zlib stream's Adler-32 is checked only when its end is read,
      // which a crop above the last row never does, yet zlib computes it
      // over every byte it inflates (4% of a decode here). Every IDAT
      // chunk's CRC-32, checked as each chunk is consumed, covers the same
      // bytes, so a flipped bit is still an error.
      png_set_option(png_, PNG_IGNORE_ADLER32, PNG_OPTION_ON);
    }
  }
  ~Reader() { png_destroy_read_struct(&png_, &info_, nullptr); }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  bool ok() const { return info_ != nullptr; }
  png_structp png() const { return png_; }
  png_infop info() const { return info_; }

 private:
  png_structp png_ = nullptr;
  png_infop info_ = nullptr;
};

// Every colour type and depth to 8-bit RGB: palettes and low-depth gray
// expanded, gray replicated, alpha dropped, 16 bits to their high byte.
void RequestRgb8(png_structp png, png_infop info) {
  const int color_type = png_get_color_type(png, info);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8) {
    png_set_expand_gray_1_2_4_to_8(png);
  }
  if (png_get_bit_depth(png, info) == 16) png_set_strip_16(png);
  if (!(color_type & PNG_COLOR_MASK_COLOR)) png_set_gray_to_rgb(png);
  if (color_type & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
}

absl::Status Corrupt(const Source& source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", source.message));
}

}  // namespace

absl::StatusOr<PngHeader> ReadPngHeader(absl::string_view data, int64_t max_pixels) {
  Source source{data};
  Reader reader(source);
  if (!reader.ok()) return absl::ResourceExhaustedError("cannot create a PNG decoder");
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0, interlace = 0;
  if (setjmp(png_jmpbuf(reader.png()))) return Corrupt(source, "corrupt PNG header");
  png_read_info(reader.png(), reader.info());
  png_get_IHDR(reader.png(), reader.info(), &width, &height, &bit_depth, &color_type, &interlace,
               nullptr, nullptr);
  if (width == 0 || height == 0) return absl::InvalidArgumentError("PNG header with zero size");
  RETURN_IF_ERROR(CheckClaimedPixels(width, height, max_pixels));
  PngHeader header;
  header.width = static_cast<int>(width);
  header.height = static_cast<int>(height);
  header.interlaced = interlace != PNG_INTERLACE_NONE;
  return header;
}

absl::Status DecodePngRegion(absl::string_view data, const PngHeader& header,
                             const cv::Rect& region, cv::Mat& out) {
  if (!HasEnd(data)) return absl::InvalidArgumentError("truncated PNG: no IEND chunk at its end");
  // Everything libpng writes into is allocated before setjmp, so a longjmp
  // leaves no C++ object half-made. Interlaced files need every row of the
  // image; others only down to the region's last, the rows above it decoded
  // into one scratch row.
  const int first = header.interlaced ? 0 : region.y;
  const int last = header.interlaced ? header.height : region.y + region.height;
  cv::Mat rows(last - first, header.width, CV_8UC3);
  std::vector<uint8_t> scratch(static_cast<size_t>(header.width) * 3);
  std::vector<png_bytep> pointers(static_cast<size_t>(header.height), scratch.data());
  for (int y = first; y < last; ++y) pointers[y] = rows.ptr(y - first);
  Source source{data};
  Reader reader(source);
  if (!reader.ok()) return absl::ResourceExhaustedError("cannot create a PNG decoder");
  if (setjmp(png_jmpbuf(reader.png()))) return Corrupt(source, "corrupt PNG data");
  png_read_info(reader.png(), reader.info());
  if (static_cast<int>(png_get_image_width(reader.png(), reader.info())) != header.width ||
      static_cast<int>(png_get_image_height(reader.png(), reader.info())) != header.height) {
    return absl::InvalidArgumentError("PNG header changed between reads");
  }
  RequestRgb8(reader.png(), reader.info());
  const int passes = png_set_interlace_handling(reader.png());
  png_read_update_info(reader.png(), reader.info());
  if (png_get_rowbytes(reader.png(), reader.info()) != scratch.size()) {
    return absl::InternalError("PNG rows are not 8-bit RGB after conversion");
  }
  for (int pass = 0; pass < passes; ++pass) {
    for (int y = 0; y < last; ++y) png_read_row(reader.png(), pointers[y], nullptr);
  }
  out = rows(cv::Rect(region.x, region.y - first, region.width, region.height));
  return absl::OkStatus();
}

}  // namespace heterodl
