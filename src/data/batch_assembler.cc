#include "src/data/batch_assembler.h"

#include <cstring>

#include "absl/time/clock.h"
#include "src/common/counter_rng.h"
#include "src/common/log.h"

namespace heterodl {
namespace {

// Replacement candidates tried before a slot is zero-filled.
constexpr int kReplacementAttempts = 3;

double SecondsSince(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

}  // namespace

BatchAssembler::BatchAssembler(const Dataset& dataset, const Pipeline& pipeline)
    : dataset_(dataset), pipeline_(pipeline) {}

bool BatchAssembler::FirstReport(bool failure, int64_t index) const {
  absl::MutexLock lock(&mu_);
  return (failure ? reported_failures_ : reported_warnings_).insert(index).second;
}

absl::Status BatchAssembler::LoadSample(const BatchRequestSpec& request, int64_t index,
                                        uint8_t* out, StageSeconds* seconds, bool* warned) const {
  if (request.abandoned != nullptr && request.abandoned->load(std::memory_order_relaxed)) {
    return absl::CancelledError("abandoned: no stream wants this sample any more");
  }
  absl::Time start = absl::Now();
  absl::StatusOr<std::string> bytes = dataset_.ReadSample(static_cast<size_t>(index));
  seconds->read += SecondsSince(start);
  absl::Status status = bytes.status();
  if (status.ok()) {
    PipelineTimings timings;
    status = pipeline_.Run(*bytes, {request.seed, request.epoch, static_cast<uint64_t>(index)}, out,
                           &timings, request.abandoned);
    if (absl::IsCancelled(status)) {
      return status;  // not the sample's fault: neither logged nor counted
    }
    seconds->decode += timings.decode_seconds;
    seconds->augment += timings.augment_seconds;
    *warned = status.ok() && !timings.decode_warning.empty();
    if (*warned && FirstReport(/*failure=*/false, index)) {
      LogWarning(
          "sample %d (%s) decoded with a warning (kept; serve --strict-decode replaces "
          "such samples): %s",
          index, dataset_.sample(static_cast<size_t>(index)).path, timings.decode_warning);
    }
  }
  if (!status.ok() && FirstReport(/*failure=*/true, index)) {
    LogWarning("sample %d (%s) failed and is replaced: %s", index,
               dataset_.sample(static_cast<size_t>(index)).path, status.ToString());
  }
  return status;
}

std::vector<SlotResult> BatchAssembler::Assemble(const BatchRequestSpec& request, uint8_t* pixels,
                                                 StageSeconds* seconds) const {
  if (dataset_.synthetic()) {
    std::memset(pixels, kSyntheticPixel, request.indices.size() * sample_bytes());
    return SyntheticSlots(request.indices);
  }
  std::vector<SlotResult> slots;
  slots.reserve(request.indices.size());
  for (size_t slot = 0; slot < request.indices.size(); ++slot) {
    slots.push_back(AssembleSlot(request, slot, pixels, seconds));
  }
  return slots;
}

SlotResult BatchAssembler::AssembleSlot(const BatchRequestSpec& request, size_t slot,
                                        uint8_t* pixels, StageSeconds* seconds) const {
  const size_t bytes_per_sample = sample_bytes();
  const int64_t index = request.indices[slot];
  uint8_t* out = pixels + slot * bytes_per_sample;
  SlotResult result{index, dataset_.sample(static_cast<size_t>(index)).label, SampleOutcome::kOk};
  if (dataset_.synthetic()) {
    std::memset(out, kSyntheticPixel, bytes_per_sample);
    return result;
  }
  const absl::Status loaded =
      LoadSample(request, index, out, seconds, &result.decoded_with_warning);
  if (loaded.ok()) {
    return result;
  }
  if (absl::IsCancelled(loaded)) {
    result.outcome = SampleOutcome::kAbandoned;
    return result;
  }
  result.outcome = SampleOutcome::kZeroFilled;
  CounterRng rng(request.seed, {kStreamReplacement, request.epoch, static_cast<uint32_t>(index)});
  for (int attempt = 0; attempt < kReplacementAttempts; ++attempt) {
    const int64_t candidate = static_cast<int64_t>(rng.Below(dataset_.size()));
    if (candidate == index) {
      continue;
    }
    const absl::Status replaced =
        LoadSample(request, candidate, out, seconds, &result.decoded_with_warning);
    if (absl::IsCancelled(replaced)) {
      result.outcome = SampleOutcome::kAbandoned;
      return result;
    }
    if (replaced.ok()) {
      result.outcome = SampleOutcome::kReplaced;
      result.label = dataset_.sample(static_cast<size_t>(candidate)).label;
      return result;
    }
  }
  std::memset(out, 0, bytes_per_sample);
  return result;
}

std::vector<SlotResult> BatchAssembler::SyntheticSlots(absl::Span<const int64_t> indices) const {
  std::vector<SlotResult> slots;
  slots.reserve(indices.size());
  for (const int64_t index : indices) {
    slots.push_back({index, dataset_.sample(static_cast<size_t>(index)).label, SampleOutcome::kOk});
  }
  return slots;
}

int64_t BatchAssembler::distinct_failed_samples() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(reported_failures_.size());
}

}  // namespace heterodl
