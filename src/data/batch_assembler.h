// BatchAssembler: reads, decodes and augments the samples of one batch into a
// caller-provided uint8 NHWC buffer.
//
//   BatchAssembler assembler(dataset, pipeline);
//   std::vector<uint8_t> pixels(indices.size() * assembler.sample_bytes());
//   std::vector<SlotResult> slots =
//       assembler.Assemble({seed, epoch, indices}, pixels.data(), &times);
//
// A sample that cannot be read or decoded never fails the batch: its slot is
// filled by a replacement sample picked deterministically from (seed, epoch,
// index), or with zeros if no replacement decodes either, and the slot says so.
// Thread-safe: many workers may assemble batches at once.
#ifndef HETERODL_SRC_DATA_BATCH_ASSEMBLER_H_
#define HETERODL_SRC_DATA_BATCH_ASSEMBLER_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "augment/pipeline.h"
#include "src/data/dataset.h"

namespace heterodl {

// kAbandoned: not built, the batch having been abandoned (see
// BatchRequestSpec::abandoned).
enum class SampleOutcome { kOk, kReplaced, kZeroFilled, kAbandoned };

struct SlotResult {
  int64_t index = 0;  // the planned dataset index
  int64_t label = 0;  // label of the image actually in the slot
  SampleOutcome outcome = SampleOutcome::kOk;
  // The image in the slot was decoded around damaged data (a JPEG scan that
  // ends early; see PipelineOptions::strict_decode).
  bool decoded_with_warning = false;
};

// Seconds spent per stage, summed over the samples of a batch.
struct StageSeconds {
  double read = 0;
  double decode = 0;
  double augment = 0;
};

struct BatchRequestSpec {
  uint64_t seed = 0;
  uint32_t epoch = 0;
  absl::Span<const int64_t> indices;
  // Optional: once true, no one wants the batch any more; samples stop
  // before decoding or their next operation, are not replaced and do not
  // count as failed (their slots are left as they are).
  const std::atomic<bool>* abandoned = nullptr;
};

class BatchAssembler {
 public:
  // `dataset` and `pipeline` must outlive the assembler.
  BatchAssembler(const Dataset& dataset, const Pipeline& pipeline);

  size_t sample_bytes() const { return pipeline_.output_bytes(); }
  const Pipeline& pipeline() const { return pipeline_; }

  // Writes indices.size() * sample_bytes() bytes to `pixels`.
  // REQUIRES: every index < dataset size (validated by the caller).
  std::vector<SlotResult> Assemble(const BatchRequestSpec& request, uint8_t* pixels,
                                   StageSeconds* seconds) const;

  // One slot of Assemble: writes sample_bytes() bytes to `pixels` + slot *
  // sample_bytes(). Slots of one batch may be assembled concurrently, on
  // different threads, with different `seconds`.
  // REQUIRES: slot < request.indices.size(); the index < dataset size.
  SlotResult AssembleSlot(const BatchRequestSpec& request, size_t slot, uint8_t* pixels,
                          StageSeconds* seconds) const;

  // The slots of a batch of a synthetic dataset, whose pixels are all
  // kSyntheticPixel: such batches differ only in their slots, so a server can
  // build the pixels once and send them again (Assemble writes the same).
  // REQUIRES: the dataset is synthetic.
  std::vector<SlotResult> SyntheticSlots(absl::Span<const int64_t> indices) const;
  static constexpr uint8_t kSyntheticPixel = 128;

  // Samples that failed so far (each counted once), for stats.
  int64_t distinct_failed_samples() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Reads and augments one sample into `out`; sets `*warned` when it was
  // decoded around damage. Logs the first failure or warning of each sample.
  absl::Status LoadSample(const BatchRequestSpec& request, int64_t index, uint8_t* out,
                          StageSeconds* seconds, bool* warned) const ABSL_LOCKS_EXCLUDED(mu_);
  // True the first time sample `index` fails (or, with `failure` false, is
  // decoded with a warning): each is logged once.
  bool FirstReport(bool failure, int64_t index) const ABSL_LOCKS_EXCLUDED(mu_);

  const Dataset& dataset_;
  const Pipeline& pipeline_;
  mutable absl::Mutex mu_;
  mutable absl::flat_hash_set<int64_t> reported_failures_ ABSL_GUARDED_BY(mu_);
  mutable absl::flat_hash_set<int64_t> reported_warnings_ ABSL_GUARDED_BY(mu_);
};

}  // namespace heterodl

#endif  // HETERODL_SRC_DATA_BATCH_ASSEMBLER_H_
