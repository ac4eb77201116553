#include "src/data/python/python_sources.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "src/common/status_macros.h"

namespace heterodl {
namespace {

// What DatasetInfo says of a Python dataset's batches: its fields and
// sample structure, and for (image, label) samples, the images' size.
void DescribeBatches(const PythonDataset& python, v1::DatasetInfo& info) {
  *info.mutable_fields() = python.fields();
  *info.mutable_sample_structure() = python.structure();
  if (python.labelled_images()) {
    info.set_height(python.fields()[0].shape(0));
    info.set_width(python.fields()[0].shape(1));
  }
}

}  // namespace

// Each item one sample, made by a worker into its rows of the dense fields.
class PythonSampleSource::Batch final : public SourceBatch {
 public:
  Batch(const PythonSampleSource& source, const BatchRequestSpec& request, BatchLayout planned,
        uint8_t* data, BatchPayload& payload)
      : python_(*source.python_),
        request_(request),
        planned_(std::move(planned)),
        data_(data),
        payload_(payload),
        slots_(request.indices.size()) {}

  void BuildItem(int item) override {
    if (request_.abandoned != nullptr && request_.abandoned->load()) {
      return;  // no one wants the batch: its slots stay as they are
    }
    const absl::Time start = absl::Now();
    SlotResult slot = python_.BuildSlot(request_.seed, request_.epoch, request_.indices,
                                        static_cast<size_t>(item), data_, planned_);
    absl::MutexLock lock(&mu_);
    slots_[static_cast<size_t>(item)] = std::move(slot);
    seconds_.augment += absl::ToDoubleSeconds(absl::Now() - start);
  }

  absl::Status Finish(v1::Batch& header) override {
    absl::MutexLock lock(&mu_);
    WriteSlots(slots_, header);
    if (python_.labelled_images()) {  // other Python datasets' fields say their shapes
      header.set_height(python_.fields()[0].shape(0));
      header.set_width(python_.fields()[0].shape(1));
      header.set_channels(3);
    }
    return python_.has_ragged_fields() ? PlaceRagged(header) : absl::OkStatus();
  }

  StageSeconds seconds() const override {
    absl::MutexLock lock(&mu_);
    return seconds_;
  }

 private:
  // Each ragged field's elements, every sample's in turn, after the dense
  // fields. A sample's bytes hold its fields one after another.
  absl::Status PlaceRagged(v1::Batch& header) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    size_t ragged_fields = 0;
    for (const v1::FieldSpec& field : python_.fields()) {
      ragged_fields += field.ragged() ? 1 : 0;
    }
    for (const SlotResult& slot : slots_) {
      if (slot.ragged_lengths.size() != ragged_fields) {  // BuildSlot sets them all
        return absl::InternalError(absl::StrCat("a slot with ", slot.ragged_lengths.size(),
                                                " ragged lengths of ", ragged_fields));
      }
    }
    for (size_t f = 0; f < ragged_fields; ++f) {
      v1::RaggedLengths* lengths = header.add_ragged_lengths();
      for (const SlotResult& slot : slots_) {
        lengths->add_lengths(slot.ragged_lengths[f]);
      }
    }
    ASSIGN_OR_RETURN(const BatchLayout layout,
                     LayOutRagged(python_.fields(), header, planned_, request_.max_batch_bytes,
                                  payload_, data_));
    std::vector<uint64_t> read(slots_.size(), 0);
    size_t f = 0;
    for (const FieldSlice& field : layout.fields) {
      if (!field.ragged) {
        continue;
      }
      const uint64_t element_bytes = field.row_bytes();
      uint64_t write = field.offset;
      for (size_t i = 0; i < slots_.size(); ++i) {
        const uint64_t bytes = slots_[i].ragged_lengths[f] * element_bytes;
        std::memcpy(data_ + write, slots_[i].ragged_bytes.data() + read[i], bytes);
        write += bytes;
        read[i] += bytes;
      }
      ++f;
    }
    return absl::OkStatus();
  }

  PythonDataset& python_;
  const BatchRequestSpec request_;
  const BatchLayout planned_;
  uint8_t* data_;  // the payload's start (it moves when ragged fields outgrow the plan)
  BatchPayload& payload_;
  mutable absl::Mutex mu_;
  std::vector<SlotResult> slots_ ABSL_GUARDED_BY(mu_);
  StageSeconds seconds_ ABSL_GUARDED_BY(mu_);
};

PythonSampleSource::PythonSampleSource(std::shared_ptr<PythonDataset> python)
    : python_(std::move(python)) {}

void PythonSampleSource::Describe(v1::DatasetInfo& info) const { DescribeBatches(*python_, info); }

absl::StatusOr<std::unique_ptr<SourceBatch>> PythonSampleSource::Start(
    const BatchRequestSpec& request, BatchPayload& payload) const {
  ASSIGN_OR_RETURN(BatchLayout planned, PlannedLayout(static_cast<uint32_t>(request.indices.size()),
                                                      request.max_batch_bytes));
  ASSIGN_OR_RETURN(uint8_t* const data, payload.Allocate(planned));
  return std::make_unique<Batch>(*this, request, std::move(planned), data, payload);
}

// One item: the whole batch, made and collated by one worker, in a buffer
// of the size it turned out to need.
class PythonCollatedSource::Batch final : public SourceBatch {
 public:
  Batch(const PythonCollatedSource& source, const BatchRequestSpec& request, BatchPayload& payload)
      : python_(*source.python_), request_(request), payload_(payload) {}

  void BuildItem(int /*item*/) override {
    if (request_.abandoned != nullptr && request_.abandoned->load()) {
      made_ = absl::CancelledError("the stream ended first");
      return;
    }
    const absl::Time start = absl::Now();
    // Called again (for no bytes) when the batch made first cannot be
    // written: the first buffer, and the memory reserved, go then.
    made_ = python_.BuildBatch(
        request_.seed, request_.epoch, request_.indices, request_.max_batch_bytes,
        [this](const BatchLayout& layout) { return payload_.Allocate(layout); });
    seconds_.augment = absl::ToDoubleSeconds(absl::Now() - start);
  }

  absl::Status Finish(v1::Batch& header) override {
    RETURN_IF_ERROR(made_.status());
    WriteSlots(made_->slots, header);
    *header.mutable_collated_shapes() = made_->shapes;
    return absl::OkStatus();
  }

  // The one item has run (Finish comes after it, on the pool's word).
  StageSeconds seconds() const override { return seconds_; }

 private:
  PythonDataset& python_;
  const BatchRequestSpec request_;
  BatchPayload& payload_;
  // Written by the one item, read by Finish after it.
  absl::StatusOr<PythonDataset::CollatedBatch> made_ = absl::UnknownError("not made");
  StageSeconds seconds_;
};

PythonCollatedSource::PythonCollatedSource(std::shared_ptr<PythonDataset> python)
    : python_(std::move(python)) {}

void PythonCollatedSource::Describe(v1::DatasetInfo& info) const {
  DescribeBatches(*python_, info);
}

absl::StatusOr<std::unique_ptr<SourceBatch>> PythonCollatedSource::Start(
    const BatchRequestSpec& request, BatchPayload& payload) const {
  return std::make_unique<Batch>(*this, request, payload);
}

PythonSources::PythonSources(std::shared_ptr<PythonDataset> python)
    : python_(std::move(python)),
      source_(python_->collates() ? std::shared_ptr<const BatchSource>(
                                        std::make_shared<const PythonCollatedSource>(python_))
                                  : std::make_shared<const PythonSampleSource>(python_)) {}

absl::StatusOr<std::shared_ptr<const BatchSource>> PythonSources::Make(
    const std::string& pipeline) const {
  return absl::InvalidArgumentError(
      absl::StrCat("this server serves the Python dataset ", python_->source(),
                   " (--python-dataset), whose samples are made by its own code: a pipeline ('",
                   pipeline.substr(0, 64), "') does not apply"));
}

void PythonSources::Describe(v1::DatasetInfo& info) const {
  info.set_fingerprint(python_->fingerprint());
  info.set_num_samples(python_->size());
  info.set_source(python_->source());
  *info.mutable_class_names() = python_->class_names();
}

}  // namespace heterodl
