#include "augment/png_decoder.h"

// clang-format off
#include <png.h>
// clang-format on
#include <libdeflate.h>

#include <algorithm>
#include <array>
#include <csetjmp>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "augment/image_format.h"
#include "src/common/status_macros.h"

namespace heterodl {
namespace {

// What libpng reads: byte ranges read in order as one stream (the file, or
// the file's start followed by re-framed pixel data), and what libpng
// reported before giving up.
class Source {
 public:
  explicit Source(std::vector<absl::string_view> parts) : parts_(std::move(parts)) {}

  // Copies the next `length` bytes to `out`; false when fewer remain.
  bool Read(png_bytep out, size_t length) {
    while (length > 0) {
      if (part_ == parts_.size()) {
        return false;
      }
      const absl::string_view part = parts_[part_];
      const size_t take = std::min(length, part.size() - offset_);
      std::memcpy(out, part.data() + offset_, take);
      out += take;
      length -= take;
      position_ += take;
      offset_ += take;
      if (offset_ == part.size()) {
        ++part_;
        offset_ = 0;
      }
    }
    return true;
  }

  // Bytes read so far.
  size_t position() const { return position_; }

  char message[200] = "";

 private:
  std::vector<absl::string_view> parts_;
  size_t part_ = 0;
  size_t offset_ = 0;
  size_t position_ = 0;
};

void ReadBytes(png_structp png, png_bytep out, png_size_t length) {
  if (!static_cast<Source*>(png_get_io_ptr(png))->Read(out, length)) {
    png_error(png, "truncated data");
  }
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
  // `restored`: `source` carries a StoredPixelStream, whose chunks have no
  // CRCs to check (the file's own were checked).
  explicit Reader(Source& source, bool restored = false) {
    png_ = png_create_read_struct(PNG_LIBPNG_VER_STRING, &source, OnError, OnWarning);
    if (png_ != nullptr) {
      info_ = png_create_info_struct(png_);
    }
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
      if (restored) {
        png_set_crc_action(png_, PNG_CRC_QUIET_USE, PNG_CRC_DEFAULT);
      }
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
  if (color_type == PNG_COLOR_TYPE_PALETTE) {
    png_set_palette_to_rgb(png);
  }
  if (color_type == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8) {
    png_set_expand_gray_1_2_4_to_8(png);
  }
  if (png_get_bit_depth(png, info) == 16) {
    png_set_strip_16(png);
  }
  if (!(color_type & PNG_COLOR_MASK_COLOR)) {
    png_set_gray_to_rgb(png);
  }
  if (color_type & PNG_COLOR_MASK_ALPHA) {
    png_set_strip_alpha(png);
  }
}

// PNG's big-endian 32-bit fields, read at `at` by libpng's own helper.
uint32_t Read32(absl::string_view data, size_t at) {
  return png_get_uint_32(reinterpret_cast<png_const_bytep>(data.data() + at));
}

// The compressed pixel data: the run of IDAT chunks at the header's offset,
// each checked against its CRC-32, joined into `joined` when there are
// several (encoders split the stream every 8 or 64 KiB).
absl::StatusOr<absl::string_view> CompressedPixels(absl::string_view data, const PngHeader& header,
                                                   std::string& joined) {
  std::vector<absl::string_view> chunks;
  size_t at = header.pixel_data_offset;
  while (at <= data.size() && data.size() - at >= 12 && data.substr(at + 4, 4) == "IDAT") {
    const size_t length = Read32(data, at);
    if (length > data.size() - at - 12) {
      return absl::InvalidArgumentError("corrupt PNG data: an IDAT chunk runs past the file");
    }
    const uint32_t crc = libdeflate_crc32(0, data.data() + at + 4, length + 4);
    if (crc != Read32(data, at + 8 + length)) {
      return absl::InvalidArgumentError("corrupt PNG data: IDAT: CRC error");
    }
    chunks.push_back(data.substr(at + 8, length));
    at += 12 + length;
  }
  if (chunks.empty()) {
    return absl::InvalidArgumentError("corrupt PNG data: no IDAT chunk");
  }
  if (chunks.size() == 1) {
    return chunks[0];
  }
  joined = absl::StrJoin(chunks, "");
  return absl::string_view(joined);
}

struct DecompressorDeleter {
  void operator()(libdeflate_decompressor* decompressor) const {
    libdeflate_free_decompressor(decompressor);
  }
};

// The pixel data inflated: every row, each with its filter byte. Null when
// the stream holds more than the image's rows: libpng, which stops reading
// after the last row, then inflates it and takes what it needs, as it
// always has (and as OpenCV does).
absl::StatusOr<std::unique_ptr<uint8_t[]>> InflatePixels(absl::string_view data,
                                                         const PngHeader& header,
                                                         size_t inflated_bytes) {
  std::string joined;
  ASSIGN_OR_RETURN(const absl::string_view compressed, CompressedPixels(data, header, joined));
  std::unique_ptr<libdeflate_decompressor, DecompressorDeleter> decompressor(
      libdeflate_alloc_decompressor());
  if (decompressor == nullptr) {
    return absl::ResourceExhaustedError("cannot create an inflater");
  }
  std::unique_ptr<uint8_t[]> inflated(new uint8_t[inflated_bytes]);
  // Also checks the stream's Adler-32 over every inflated byte.
  switch (libdeflate_zlib_decompress(decompressor.get(), compressed.data(), compressed.size(),
                                     inflated.get(), inflated_bytes, nullptr)) {
    case LIBDEFLATE_SUCCESS:
      return inflated;
    case LIBDEFLATE_SHORT_OUTPUT:
      return absl::InvalidArgumentError("corrupt PNG data: less pixel data than the image needs");
    case LIBDEFLATE_INSUFFICIENT_SPACE:
      return nullptr;
    default:
      return absl::InvalidArgumentError("corrupt PNG data: invalid compressed pixel data");
  }
}

// The file's start, up to its pixel data, followed by inflated pixel data
// framed once more as a PNG's: a zlib stream of stored (uncompressed)
// deflate blocks, one IDAT chunk each, then IEND. libpng "inflates" it by
// copying. Its chunks carry no CRCs: it is made here, from checked bytes.
// It holds the inflated pixels (`size` bytes) that its parts point into.
class StoredPixelStream {
 public:
  StoredPixelStream(absl::string_view prefix, std::unique_ptr<uint8_t[]> inflated, size_t size)
      : inflated_(std::move(inflated)) {
    const uint8_t* pixels = inflated_.get();
    constexpr size_t kMaxBlock = 65535;
    const size_t blocks = (size + kMaxBlock - 1) / kMaxBlock;
    block_heads_.resize(blocks);
    parts_.reserve(3 * blocks + 3);
    parts_.push_back(prefix);
    parts_.push_back(View(kZlibHead));
    for (size_t i = 0; i < blocks; ++i) {
      const size_t length = std::min(kMaxBlock, size - i * kMaxBlock);
      std::array<uint8_t, 13>& head = block_heads_[i];
      png_save_uint_32(head.data(), static_cast<png_uint_32>(5 + length));
      std::memcpy(head.data() + 4, "IDAT", 4);
      head[8] = static_cast<uint8_t>(i + 1 == blocks);  // BFINAL on the last; BTYPE 00: stored
      head[9] = static_cast<uint8_t>(length);
      head[10] = static_cast<uint8_t>(length >> 8);
      head[11] = static_cast<uint8_t>(~length);
      head[12] = static_cast<uint8_t>(~length >> 8);
      parts_.push_back(View(head));
      parts_.push_back(
          absl::string_view(reinterpret_cast<const char*>(pixels) + i * kMaxBlock, length));
      parts_.push_back(View(kNoCrc));
    }
    // The zlib stream's Adler-32 in a chunk of its own, then IEND.
    std::memcpy(tail_.data(), "\0\0\0\4IDAT", 8);
    png_save_uint_32(tail_.data() + 8, libdeflate_adler32(1, pixels, size));
    std::memcpy(tail_.data() + 16, "\0\0\0\0IEND\xae\x42\x60\x82", 12);
    parts_.push_back(View(tail_));
  }
  StoredPixelStream(const StoredPixelStream&) = delete;
  StoredPixelStream& operator=(const StoredPixelStream&) = delete;

  const std::vector<absl::string_view>& parts() const { return parts_; }

 private:
  // A chunk holding the zlib header (deflate, 32 KiB window, no dictionary)
  // and the CRC field.
  static constexpr std::array<uint8_t, 14> kZlibHead = {0,   0,    0,    2, 'I', 'D', 'A',
                                                        'T', 0x78, 0x01, 0, 0,   0,   0};
  static constexpr std::array<uint8_t, 4> kNoCrc = {0, 0, 0, 0};

  template <size_t N>
  static absl::string_view View(const std::array<uint8_t, N>& bytes) {
    return absl::string_view(reinterpret_cast<const char*>(bytes.data()), N);
  }

  std::unique_ptr<uint8_t[]> inflated_;
  std::vector<std::array<uint8_t, 13>> block_heads_;  // chunk header + stored block header
  std::array<uint8_t, 28> tail_{};                    // Adler-32 chunk (its CRC 0), IEND
  std::vector<absl::string_view> parts_;
};

absl::Status Corrupt(const Source& source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", source.message));
}

}  // namespace

absl::StatusOr<PngHeader> ReadPngHeader(absl::string_view data, int64_t max_pixels) {
  Source source({data});
  Reader reader(source);
  if (!reader.ok()) {
    return absl::ResourceExhaustedError("cannot create a PNG decoder");
  }
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0, interlace = 0;
  if (setjmp(png_jmpbuf(reader.png()))) {
    return Corrupt(source, "corrupt PNG header");
  }
  png_read_info(reader.png(), reader.info());
  png_get_IHDR(reader.png(), reader.info(), &width, &height, &bit_depth, &color_type, &interlace,
               nullptr, nullptr);
  if (width == 0 || height == 0) {
    return absl::InvalidArgumentError("PNG header with zero size");
  }
  RETURN_IF_ERROR(CheckClaimedPixels(width, height, max_pixels));
  PngHeader header;
  header.width = static_cast<int>(width);
  header.height = static_cast<int>(height);
  header.interlaced = interlace != PNG_INTERLACE_NONE;
  // png_read_info stops after the first IDAT chunk's length and type.
  header.pixel_data_offset = source.position() - 8;
  header.stored_row_bytes = png_get_rowbytes(reader.png(), reader.info());
  header.inflate_whole =
      !header.interlaced &&
      static_cast<size_t>(height) <= kMaxWholeInflateBytes / (header.stored_row_bytes + 1);
  return header;
}

absl::Status DecodePngRegion(absl::string_view data, const PngHeader& header,
                             const cv::Rect& region, cv::Mat& out) {
  if (!HasEnd(data)) {
    return absl::InvalidArgumentError("truncated PNG: no IEND chunk at its end");
  }
  // Everything libpng writes into is allocated before setjmp, so a longjmp
  // leaves no C++ object half-made. Interlaced files need every row of the
  // image; others only down to the region's last, the rows above it decoded
  // into one scratch row.
  const int first = header.interlaced ? 0 : region.y;
  const int last = header.interlaced ? header.height : region.y + region.height;
  cv::Mat rows(last - first, header.width, CV_8UC3);
  std::vector<uint8_t> scratch(static_cast<size_t>(header.width) * 3);
  std::vector<png_bytep> pointers(static_cast<size_t>(header.height), scratch.data());
  for (int y = first; y < last; ++y) {
    pointers[y] = rows.ptr(y - first);
  }
  std::optional<StoredPixelStream> restored;
  if (header.inflate_whole) {
    const size_t inflated_bytes =
        static_cast<size_t>(header.height) * (header.stored_row_bytes + 1);
    ASSIGN_OR_RETURN(std::unique_ptr<uint8_t[]> inflated,
                     InflatePixels(data, header, inflated_bytes));
    if (inflated != nullptr) {
      restored.emplace(data.substr(0, header.pixel_data_offset), std::move(inflated),
                       inflated_bytes);
    }
  }
  Source source(restored ? restored->parts() : std::vector<absl::string_view>{data});
  Reader reader(source, restored.has_value());
  if (!reader.ok()) {
    return absl::ResourceExhaustedError("cannot create a PNG decoder");
  }
  if (setjmp(png_jmpbuf(reader.png()))) {
    return Corrupt(source, "corrupt PNG data");
  }
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
    for (int y = 0; y < last; ++y) {
      png_read_row(reader.png(), pointers[y], nullptr);
    }
  }
  out = rows(cv::Rect(region.x, region.y - first, region.width, region.height));
  return absl::OkStatus();
}

absl::StatusOr<cv::Mat> DecodePngMask(absl::string_view data, int64_t max_pixels) {
  ASSIGN_OR_RETURN(const PngHeader header, ReadPngHeader(data, max_pixels));
  if (!HasEnd(data)) {
    return absl::InvalidArgumentError("truncated PNG mask: no IEND chunk at its end");
  }
  // The colour type and depth, from IHDR (bytes 24 and 25), so the pixel
  // memory is allocated before setjmp.
  const int depth = static_cast<uint8_t>(data[24]);
  const int color_type = static_cast<uint8_t>(data[25]);
  if (color_type != PNG_COLOR_TYPE_GRAY && color_type != PNG_COLOR_TYPE_PALETTE) {
    return absl::InvalidArgumentError(
        absl::StrCat("a mask PNG holds class ids: 8- or 16-bit gray or a palette, not colour type ",
                     color_type));
  }
  cv::Mat ids(header.height, header.width, depth == 16 ? CV_16UC1 : CV_8UC1);
  std::vector<png_bytep> pointers(static_cast<size_t>(header.height));
  for (int y = 0; y < header.height; ++y) {
    pointers[y] = ids.ptr(y);
  }
  Source source(std::vector<absl::string_view>{data});
  Reader reader(source);
  if (!reader.ok()) {
    return absl::ResourceExhaustedError("cannot create a PNG decoder");
  }
  if (setjmp(png_jmpbuf(reader.png()))) {
    return Corrupt(source, "corrupt PNG mask");
  }
  png_read_info(reader.png(), reader.info());
  if (depth < 8) {
    png_set_packing(reader.png());  // one id a byte, unscaled
  }
  if (depth == 16) {
    png_set_swap(reader.png());  // PNG's big-endian samples to this host's order
  }
  const int passes = png_set_interlace_handling(reader.png());
  png_read_update_info(reader.png(), reader.info());
  if (png_get_rowbytes(reader.png(), reader.info()) != ids.step[0]) {
    return absl::InternalError("PNG mask rows are not one id a pixel after conversion");
  }
  for (int pass = 0; pass < passes; ++pass) {
    for (int y = 0; y < header.height; ++y) {
      png_read_row(reader.png(), pointers[y], nullptr);
    }
  }
  return ids;
}

}  // namespace heterodl
