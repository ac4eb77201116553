#include "src/data/assembled_source.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/common/status_macros.h"

namespace heterodl {
namespace {

// Writes `values` at `slice`'s place in `payload`.
template <typename T>
void WriteField(const std::vector<T>& values, const FieldSlice& slice, uint8_t* payload) {
  std::memcpy(payload + slice.offset, values.data(), values.size() * sizeof(T));
}

}  // namespace

FieldSpecs FieldsOf(const BatchAssembler& assembler) {
  const auto height = static_cast<uint32_t>(assembler.pipeline().output_height());
  const auto width = static_cast<uint32_t>(assembler.pipeline().output_width());
  FieldSpecs fields;
  if (assembler.pipeline().multi_view()) {
    // One field per group of views (views_0, views_1, ...); images alone.
    const std::vector<ViewGroupShape>& groups = assembler.pipeline().view_groups();
    for (size_t g = 0; g < groups.size(); ++g) {
      *fields.Add() = ViewsField(static_cast<uint32_t>(g), static_cast<uint32_t>(groups[g].count),
                                 static_cast<uint32_t>(groups[g].height),
                                 static_cast<uint32_t>(groups[g].width));
    }
    return fields;
  }
  *fields.Add() = ImagesField(height, width);
  switch (assembler.mask_ids()) {
    case MaskIds::kUint8:
      *fields.Add() = MasksField(height, width, v1::DTYPE_UINT8);
      break;
    case MaskIds::kInt32:
      *fields.Add() = MasksField(height, width, v1::DTYPE_INT32);
      break;
    case MaskIds::kNone:
      break;
  }
  if (assembler.has_boxes()) {
    // Each sample's objects, after the dense fields: boxes xyxy in output
    // pixels, their category ids, and whether each is a crowd region.
    v1::FieldSpec* boxes = fields.Add();
    boxes->set_name("boxes");
    boxes->set_dtype(v1::DTYPE_FLOAT32);
    boxes->add_shape(4);
    boxes->set_ragged(true);
    v1::FieldSpec* labels = fields.Add();
    labels->set_name("box_labels");
    labels->set_dtype(v1::DTYPE_INT64);
    labels->set_ragged(true);
    v1::FieldSpec* crowd = fields.Add();
    crowd->set_name("iscrowd");
    crowd->set_dtype(v1::DTYPE_UINT8);
    crowd->set_ragged(true);
  }
  return fields;
}

// One batch: each item a sample, decoded into its rows of every dense field.
class AssembledSource::Batch final : public SourceBatch {
 public:
  Batch(const AssembledSource& source, const BatchRequestSpec& request, BatchLayout planned,
        uint8_t* data, BatchPayload& payload)
      : source_(source),
        request_(request),
        planned_(std::move(planned)),
        data_(data),
        payload_(payload),
        slots_(request.indices.size()) {
    const std::vector<ViewGroupShape>& groups = source.pipeline_.view_groups();
    const bool views = source.pipeline_.multi_view();
    destination_.images = data + FindField(planned_, views ? "views_0" : "images")->offset;
    if (const FieldSlice* masks = FindField(planned_, "masks")) {
      destination_.masks = data + masks->offset;
    }
    for (size_t g = 1; views && g < groups.size(); ++g) {
      destination_.more_views.push_back(data +
                                        FindField(planned_, absl::StrCat("views_", g))->offset);
    }
  }

  void BuildItem(int item) override {
    StageSeconds seconds;
    SlotResult slot = source_.assembler_.AssembleSlot(request_, static_cast<size_t>(item),
                                                      destination_, &seconds);
    absl::MutexLock lock(&mu_);
    slots_[static_cast<size_t>(item)] = std::move(slot);
    seconds_.read += seconds.read;
    seconds_.decode += seconds.decode;
    seconds_.augment += seconds.augment;
  }

  absl::Status Finish(v1::Batch& header) override {
    absl::MutexLock lock(&mu_);
    WriteSlots(slots_, header);
    header.set_height(static_cast<uint32_t>(source_.pipeline_.output_height()));
    header.set_width(static_cast<uint32_t>(source_.pipeline_.output_width()));
    header.set_channels(3);
    if (source_.assembler_.has_boxes()) {
      return PlaceObjects(header);
    }
    return absl::OkStatus();
  }

  StageSeconds seconds() const override {
    absl::MutexLock lock(&mu_);
    return seconds_;
  }

 private:
  // The slots' objects after the dense fields, sample after sample, each
  // sample's count in the header's ragged lengths (one per field).
  absl::Status PlaceObjects(v1::Batch& header) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<uint32_t> lengths;
    std::vector<float> boxes;  // 4 a box, xyxy
    std::vector<int64_t> labels;
    std::vector<uint8_t> crowd;
    for (const SlotResult& slot : slots_) {
      lengths.push_back(static_cast<uint32_t>(slot.boxes.size()));
      for (const Box& box : slot.boxes) {
        boxes.insert(boxes.end(), {box.x1, box.y1, box.x2, box.y2});
      }
      labels.insert(labels.end(), slot.box_labels.begin(), slot.box_labels.end());
      crowd.insert(crowd.end(), slot.crowd.begin(), slot.crowd.end());
    }
    for (int field = 0; field < 3; ++field) {  // boxes, box_labels, iscrowd: one count each
      header.add_ragged_lengths()->mutable_lengths()->Assign(lengths.begin(), lengths.end());
    }
    ASSIGN_OR_RETURN(
        const BatchLayout layout,
        LayOutRagged(source_.fields_, header, planned_, request_.max_batch_bytes, payload_, data_));
    WriteField(boxes, *FindField(layout, "boxes"), data_);
    WriteField(labels, *FindField(layout, "box_labels"), data_);
    WriteField(crowd, *FindField(layout, "iscrowd"), data_);
    return absl::OkStatus();
  }

  const AssembledSource& source_;
  const BatchRequestSpec request_;
  const BatchLayout planned_;
  BatchDestination destination_;  // into data_, as planned: read-only after construction
  uint8_t* data_;                 // the payload's start (it moves when objects outgrow the plan)
  BatchPayload& payload_;
  mutable absl::Mutex mu_;
  std::vector<SlotResult> slots_ ABSL_GUARDED_BY(mu_);
  StageSeconds seconds_ ABSL_GUARDED_BY(mu_);
};

AssembledSource::AssembledSource(const Dataset& dataset, Pipeline pipeline, MaskIds mask_ids)
    : dataset_(dataset),
      pipeline_(std::move(pipeline)),
      assembler_(dataset, pipeline_, mask_ids),
      fields_(FieldsOf(assembler_)),
      sample_cost_(pipeline_.EstimateCost().pixel_operations) {}

double AssembledSource::ItemCost(uint32_t /*samples*/) const { return sample_cost_; }

void AssembledSource::Describe(v1::DatasetInfo& info) const {
  *info.mutable_fields() = fields_;
  info.set_height(static_cast<uint32_t>(pipeline_.output_height()));
  info.set_width(static_cast<uint32_t>(pipeline_.output_width()));
}

absl::StatusOr<std::unique_ptr<SourceBatch>> AssembledSource::Start(const BatchRequestSpec& request,
                                                                    BatchPayload& payload) const {
  ASSIGN_OR_RETURN(BatchLayout planned, PlannedLayout(static_cast<uint32_t>(request.indices.size()),
                                                      request.max_batch_bytes));
  ASSIGN_OR_RETURN(uint8_t* const data, payload.Allocate(planned));
  return std::make_unique<Batch>(*this, request, std::move(planned), data, payload);
}

}  // namespace heterodl
