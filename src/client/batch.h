// Batch: what the remote loader hands a trainer, and BatchKey, which batch of
// the rank's sequence of epochs it is.
#ifndef HETERODL_SRC_CLIENT_BATCH_H_
#define HETERODL_SRC_CLIENT_BATCH_H_

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "src/common/memory/buffer_pool.h"
#include "src/wire/field_slice.h"

namespace heterodl {

// One batch: its fields (the servers' DatasetInfo.fields), each a view into
// one payload, no copies, with the per-sample labels, indices and what
// became of each slot. Classification's one field is images uint8 [size,
// height, width, 3] (NHWC, RGB); a segmentation dataset's also masks [size,
// height, width] of class ids (uint8, or int32 for 16-bit masks); a
// detection dataset's each sample's boxes (ragged); a multi-view pipeline's
// one field per group of views (views_0, views_1, ... uint8 [size, count,
// H, W, 3]) and no images; a user's own Python dataset's its own fields.
//
//   ASSIGN_OR_RETURN(absl::Span<const int32_t> masks, batch.View<int32_t>("masks"));
//   if (batch.has_images()) Train(batch.images(), batch.height(), batch.width());
// What became of one slot's planned sample (data_service.proto's
// SampleStatus; the same numbers).
enum class SlotStatus : uint8_t {
  kOk = 0,        // the planned sample
  kReplaced = 1,  // it failed; another sample (Batch::sources) fills the slot
  // It failed and so did its replacements: zeros, label -100 (a loss's
  // ignore_index), the mask's ignore index, no boxes; a collated batch
  // leaves the sample out.
  kUnfilled = 2,
};

struct Batch {
  uint32_t epoch = 0;
  int64_t index = 0;  // k within the rank's epoch
  // Every field's bytes, where `fields` says (the images at offset 0);
  // returned to the loader's pool when the Batch is destroyed (it may
  // outlive the loader).
  PooledBuffer payload;
  std::vector<FieldSlice> fields;
  std::vector<int64_t> labels;
  std::vector<int64_t> indices;  // planned dataset indices
  // Per slot: what became of its planned sample, and the dataset index of
  // the sample it holds (indices[i], a replacement's, or -1 when unfilled).
  std::vector<SlotStatus> status;
  std::vector<int64_t> sources;
  // Why each failed slot's planned sample failed, in slot order, as the
  // server says (e.g. "NOT_FOUND: cannot open 'a.jpg': ...").
  std::vector<std::string> failures;
  int failed = 0;  // slots whose status is not kOk
  // Slots decoded around damaged data (kept; data_service.proto's
  // Batch.decoded_with_warnings).
  int decoded_with_warnings = 0;
  int64_t size() const { return static_cast<int64_t>(labels.size()); }

  // The field called `name`, or null.
  const FieldSlice* Field(absl::string_view name) const {
    for (const FieldSlice& field : fields) {
      if (field.name == name) {
        return &field;
      }
    }
    return nullptr;
  }
  // Field `name`'s elements, in its shape's row-major order. NOT_FOUND
  // without such a field; INVALID_ARGUMENT when its dtype is not T's.
  template <typename T>
  absl::StatusOr<absl::Span<const T>> View(absl::string_view name) const {
    const FieldSlice* field = Field(name);
    if (field == nullptr) {
      return absl::NotFoundError(absl::StrCat("the batch has no field '", name, "'"));
    }
    if (field->dtype != ElementTypeOf<T>::kValue) {
      return absl::InvalidArgumentError(absl::StrCat("field '", name, "' holds ",
                                                     ElementTypeName(field->dtype), ", not ",
                                                     ElementTypeName(ElementTypeOf<T>::kValue)));
    }
    // Aligned for T: fields start at multiples of kFieldAlignment.
    return absl::MakeConstSpan(reinterpret_cast<const T*>(payload.data() + field->offset),
                               field->bytes / sizeof(T));
  }
  // Which field holds images uint8 [H, W, 3], if one does: "images", or a
  // Python dataset's first field when its samples are (image, label)
  // (DatasetDescription::labelled_images); -1 when none does.
  int images_field = -1;
  bool has_images() const { return images_field >= 0; }
  // The images, size() x height() x width() x channels() bytes: a
  // convenience over their field; empty without one.
  absl::Span<const uint8_t> images() const {
    if (!has_images()) {
      return {};
    }
    const FieldSlice& field = fields[static_cast<size_t>(images_field)];
    return {payload.data() + field.offset, static_cast<size_t>(field.bytes)};
  }
  // The images' shape (the field's [size, H, W, C]); 0 without images.
  int height() const { return ImageDimension(1); }
  int width() const { return ImageDimension(2); }
  int channels() const { return ImageDimension(3); }

 private:
  int ImageDimension(size_t d) const {
    if (!has_images()) {
      return 0;
    }
    const std::vector<int64_t>& shape = fields[static_cast<size_t>(images_field)].shape;
    return d < shape.size() ? static_cast<int>(shape[d]) : 0;
  }

 public:
};

// Batch `index` of `epoch` (of the loader's rank). Ordered as a trainer
// consumes them: by epoch, then index.
struct BatchKey {
  uint32_t epoch = 0;
  int64_t index = 0;

  friend bool operator<(const BatchKey& a, const BatchKey& b) {
    return std::tie(a.epoch, a.index) < std::tie(b.epoch, b.index);
  }
  friend bool operator==(const BatchKey& a, const BatchKey& b) {
    return a.epoch == b.epoch && a.index == b.index;
  }
  friend bool operator!=(const BatchKey& a, const BatchKey& b) { return !(a == b); }
  friend bool operator<=(const BatchKey& a, const BatchKey& b) { return !(b < a); }
};

}  // namespace heterodl

#endif  // HETERODL_SRC_CLIENT_BATCH_H_
