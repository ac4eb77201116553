// TFRecord files of tf.train.Example records: their framing, checksums and
// the image and label an Example holds (internal to src/data).
//
// A TFRecord file is records one after another, each
//   uint64 length | uint32 masked CRC32C of the length | data | uint32 masked CRC32C of the data
// (little-endian), with no header and no index: a file is known by its
// first record's length checksum, since TensorFlow names its files
// "train-00000-of-01024", without an extension.
//
//   if (std::optional<uint64_t> length = TfRecordLength(first_12_bytes)) { ... }
//   ASSIGN_OR_RETURN(ExampleParts parts, ParseExample(data, keys, "train-00000:17"));
#ifndef HETERODL_SRC_DATA_TFRECORD_H_
#define HETERODL_SRC_DATA_TFRECORD_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace heterodl {

// The bytes around a record's data.
inline constexpr uint64_t kTfRecordHeaderBytes = 12;
inline constexpr uint64_t kTfRecordFooterBytes = 4;

// CRC-32C (Castagnoli) of `bytes`, and the rotated, offset form TFRecord
// stores (so that a CRC of data holding CRCs is not trivially zero).
// SSE4.2's CRC32 instruction where the CPU has it, else Crc32cTable.
uint32_t Crc32c(absl::string_view bytes);
// The same by Boost.CRC's table, on any CPU.
uint32_t Crc32cTable(absl::string_view bytes);
uint32_t MaskedCrc32c(absl::string_view bytes);

// The data length a record header (its first kTfRecordHeaderBytes) gives,
// when the header's checksum holds; nullopt otherwise (not TFRecord, or
// damaged).
std::optional<uint64_t> TfRecordLength(absl::string_view header);

// Whether `footer` (the kTfRecordFooterBytes after a record's data) is
// `data`'s checksum.
bool TfRecordDataIntact(absl::string_view data, absl::string_view footer);

// A whole record (header, data, footer) for `data`: what TensorFlow's
// writer writes. For tests and tools that write records.
std::string TfRecordOf(absl::string_view data);

// Which features of an Example make a sample. TensorFlow's ImageNet layout
// by default (its build_imagenet_data.py: labels 1..1000, 0 unused).
struct TfExampleKeys {
  std::string image = "image/encoded";
  // Empty: no label (a segmentation dataset's records).
  std::string label = "image/class/label";
  // Subtracted from every label: 1 maps TensorFlow's ImageNet labels to
  // 0..999, as torchvision's models number them.
  int64_t label_offset = 0;
  // Non-empty: each record's mask, an encoded PNG of class ids
  // (e.g. "image/segmentation/class/encoded", DeepLab's layout).
  std::string mask;
};

struct ExampleParts {
  std::string image;
  int64_t label = 0;  // with the offset taken off
  std::string mask;   // when keys.mask names one
};

// The parts of the serialized Example `data`. DATA_LOSS naming `where` when
// it does not parse; INVALID_ARGUMENT when a key is missing or holds the
// wrong kind of list (naming the key and what the record holds), or a label
// is negative after the offset.
absl::StatusOr<ExampleParts> ParseExample(absl::string_view data, const TfExampleKeys& keys,
                                          const std::string& where);

}  // namespace heterodl

#endif  // HETERODL_SRC_DATA_TFRECORD_H_
