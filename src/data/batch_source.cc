#include "src/data/batch_source.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "src/common/counter_rng.h"
#include "src/common/status_macros.h"

namespace heterodl {
namespace {

// Replacement candidates tried before a slot is zero-filled.
constexpr int kReplacementAttempts = 3;
// Of a failed sample's reason, what a batch carries (Batch.failures).
constexpr size_t kMaxFailureBytes = 512;

v1::SampleStatus ToProto(SampleOutcome outcome) {
  switch (outcome) {
    case SampleOutcome::kOk:
      return v1::SAMPLE_OK;
    case SampleOutcome::kReplaced:
      return v1::SAMPLE_REPLACED;
    case SampleOutcome::kZeroFilled:
    case SampleOutcome::kAbandoned:  // such a batch is never sent
      return v1::SAMPLE_ZERO_FILLED;
  }
  return v1::SAMPLE_ZERO_FILLED;
}

}  // namespace

std::vector<int64_t> ReplacementCandidates(uint64_t seed, uint32_t epoch, int64_t index,
                                           size_t dataset_size) {
  std::vector<int64_t> candidates;
  CounterRng rng(seed, {kStreamReplacement, epoch, static_cast<uint32_t>(index)});
  for (int attempt = 0; attempt < kReplacementAttempts; ++attempt) {
    const auto candidate = static_cast<int64_t>(rng.Below(dataset_size));
    if (candidate != index) {
      candidates.push_back(candidate);
    }
  }
  return candidates;
}

absl::StatusOr<BatchLayout> BatchSource::PlannedLayout(uint32_t samples, uint64_t max_bytes) const {
  google::protobuf::RepeatedPtrField<v1::RaggedLengths> lengths;
  google::protobuf::RepeatedPtrField<v1::FieldShape> shapes;
  for (const v1::FieldSpec& field : fields()) {
    if (field.ragged()) {
      lengths.Add()->mutable_lengths()->Resize(static_cast<int>(samples), kPlannedRaggedLength);
    }
    if (field.collated()) {
      v1::FieldShape* shape = shapes.Add();
      *shape->mutable_dims() = field.shape();
      if (shape->dims_size() > 0) {
        shape->set_dims(0, samples);
      }
    }
  }
  return LayOutBatch(fields(), samples, lengths, shapes, max_bytes);
}

uint64_t BatchSource::PlannedBytes(uint32_t samples) const {
  const absl::StatusOr<BatchLayout> layout =
      PlannedLayout(samples, std::numeric_limits<uint64_t>::max());
  return layout.ok() ? layout->payload_bytes : std::numeric_limits<uint64_t>::max();
}

void WriteSlots(const std::vector<SlotResult>& slots, v1::Batch& header) {
  uint32_t failed = 0;
  uint32_t warned = 0;
  for (const SlotResult& slot : slots) {
    header.add_labels(slot.label);
    header.add_indices(slot.index);
    header.add_status(ToProto(slot.outcome));
    failed += slot.outcome != SampleOutcome::kOk ? 1 : 0;
    warned += slot.decoded_with_warning ? 1 : 0;
  }
  if (failed > 0) {
    for (const SlotResult& slot : slots) {
      header.add_sources(slot.source);
      if (slot.outcome != SampleOutcome::kOk) {
        header.add_failures(slot.failure.substr(0, kMaxFailureBytes));
      }
    }
  }
  header.set_failed(failed);
  header.set_decoded_with_warnings(warned);
}

absl::StatusOr<BatchLayout> LayOutRagged(const FieldSpecs& fields, const v1::Batch& header,
                                         const BatchLayout& planned, uint64_t max_batch_bytes,
                                         BatchPayload& payload, uint8_t*& data) {
  ASSIGN_OR_RETURN(BatchLayout layout,
                   LayOutBatch(fields, static_cast<uint32_t>(header.indices_size()),
                               header.ragged_lengths(), header.collated_shapes(), max_batch_bytes));
  uint64_t dense_end = 0;
  for (const FieldSlice& field : layout.fields) {
    if (!field.ragged) {
      dense_end = std::max(dense_end, field.offset + field.bytes);
    }
  }
  if (layout.payload_bytes > planned.payload_bytes) {
    // More elements than planned: a larger buffer, the dense fields copied
    // over (the planned one stays valid until the batch is sent).
    const uint8_t* dense = data;
    ASSIGN_OR_RETURN(data, payload.Allocate(layout));
    std::memcpy(data, dense, dense_end);
  }
  // Zeros in the gaps that align the ragged fields.
  uint64_t end = dense_end;
  for (const FieldSlice& field : layout.fields) {
    if (field.ragged) {
      std::memset(data + end, 0, field.offset - end);
      end = field.offset + field.bytes;
    }
  }
  payload.Truncate(layout.payload_bytes);
  return layout;
}

const FieldSlice* FindField(const BatchLayout& layout, absl::string_view name) {
  for (const FieldSlice& field : layout.fields) {
    if (field.name == name) {
      return &field;
    }
  }
  return nullptr;
}

}  // namespace heterodl
