// BatchSource: how one kind of dataset makes a batch. The seam between a
// data server's scheduling (src/server/batch_service.h: validation, caches,
// the worker pool, the memory budget, stats) and the making of samples.
//
// A source owns what its batches are: their fields (DatasetInfo.fields),
// their layout before they are made (what memory is reserved for), how many
// items of work a batch is and what one costs, making an item, and
// finishing the batch (ragged fields placed after the dense ones, the
// header's per-sample fields written). The sources:
//   - AssembledSource (assembled_source.h): images decoded and augmented by
//     a Pipeline, with a dataset's masks, boxes or several views;
//   - SyntheticSource (synthetic_source.h): pixels built once, for the wire;
//   - PythonSampleSource and PythonCollatedSource
//     (python/python_sources.h): a user's own Python dataset's samples, or
//     its module's collate_fn's batches.
// DatasetSources (below) is what a server serves: a dataset's identity and
// the source each pipeline a stream names makes of it.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<SourceBatch> batch, source.Start(request, payload));
//   for (int item = 0; item < source.Items(samples); ++item) {
//     batch->BuildItem(item);  // on any threads, concurrently
//   }
//   RETURN_IF_ERROR(batch->Finish(header));
#ifndef HETERODL_SRC_DATA_BATCH_SOURCE_H_
#define HETERODL_SRC_DATA_BATCH_SOURCE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "augment/boxes.h"
#include "heterodl/data_service.pb.h"
#include "src/wire/batch_layout.h"

namespace heterodl {

using FieldSpecs = google::protobuf::RepeatedPtrField<v1::FieldSpec>;

// kAbandoned: not built, the batch having been abandoned (see
// BatchRequestSpec::abandoned).
enum class SampleOutcome { kOk, kReplaced, kZeroFilled, kAbandoned };

// The label of a slot that no sample could fill (kZeroFilled):
// PyTorch's cross_entropy ignore_index, so a loss skips the slot instead of
// learning a black image as its planned sample's class.
inline constexpr int64_t kUnfilledLabel = -100;

// What became of one slot of a batch.
struct SlotResult {
  int64_t index = 0;  // the planned dataset index
  int64_t label = 0;  // label of the image actually in the slot
  SampleOutcome outcome = SampleOutcome::kOk;
  // The dataset index of the sample in the slot: `index`, a replacement's,
  // or -1 when none could be made (kZeroFilled).
  int64_t source = 0;
  // Why the planned sample failed (kReplaced, kZeroFilled): its status,
  // e.g. "NOT_FOUND: cannot open 'a.jpg': No such file or directory".
  std::string failure;
  // The image in the slot was decoded around damaged data (a JPEG scan that
  // ends early; see PipelineOptions::strict_decode).
  bool decoded_with_warning = false;
  // A detection dataset's: the objects of the image in the slot that the
  // pipeline kept (SampleBoxes), boxes xyxy in output pixels, their
  // category ids and crowd flags; none in a zero-filled slot.
  std::vector<Box> boxes;
  std::vector<int64_t> box_labels;
  std::vector<uint8_t> crowd;
  // A user's own Python dataset's: the sample's ragged fields (in the
  // order of its fields), each one's element count, and their bytes one
  // after another; none in a zero-filled slot.
  std::vector<uint32_t> ragged_lengths;
  std::string ragged_bytes;
};

// Seconds spent per stage, summed over the samples of a batch.
struct StageSeconds {
  double read = 0;
  double decode = 0;
  double augment = 0;
};

// Which batch to make.
struct BatchRequestSpec {
  uint64_t seed = 0;
  uint32_t epoch = 0;
  absl::Span<const int64_t> indices;
  // Optional: once true, no one wants the batch any more; samples stop
  // before decoding or their next operation, are not replaced and do not
  // count as failed (their slots are left as they are).
  const std::atomic<bool>* abandoned = nullptr;
  // A batch's payload may not be larger (RequestLimits::max_batch_bytes).
  uint64_t max_batch_bytes = uint64_t{1} << 30;
};

// The samples tried, in order, in place of sample `index` of `epoch` that
// failed, before its slot is zeroed: a few drawn from (seed, epoch, index),
// so every server replaces it alike; none is `index` itself. Every source
// replaces by this rule.
std::vector<int64_t> ReplacementCandidates(uint64_t seed, uint32_t epoch, int64_t index,
                                           size_t dataset_size);

// Where a batch's bytes go: the server's buffers, from its memory budget.
class BatchPayload {
 public:
  virtual ~BatchPayload() = default;
  // A buffer for a batch laid out as `layout`, the gaps between its fields
  // zeroed: the batch's payload from now on. A buffer taken before stays
  // valid until the batch is sent (Finish may copy from it into a larger
  // one). The server's error (RESOURCE_EXHAUSTED) when there is none.
  virtual absl::StatusOr<uint8_t*> Allocate(const BatchLayout& layout) = 0;
  // The batch's payload is `bytes`, shared and never written (a synthetic
  // dataset's batches, built once).
  virtual void Share(std::shared_ptr<const std::vector<uint8_t>> bytes) = 0;
  // The payload is its first `bytes` (at most what was allocated): a batch
  // whose ragged fields hold fewer elements than planned.
  virtual void Truncate(uint64_t bytes) = 0;
};

// One batch being made by a source.
class SourceBatch {
 public:
  virtual ~SourceBatch() = default;
  // Makes item `item` (0 <= item < the source's Items()); items run
  // concurrently, on any threads.
  virtual void BuildItem(int item) = 0;
  // Once every item ran: writes the header's per-sample fields (WriteSlots,
  // the image shape, ragged lengths, collated shapes) and lays the payload
  // out as they say (ragged fields placed).
  virtual absl::Status Finish(v1::Batch& header) = 0;
  // What its items spent reading, decoding and augmenting, summed.
  virtual StageSeconds seconds() const = 0;
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;

  // The fields of its batches, in payload order.
  virtual const FieldSpecs& fields() const = 0;
  // The layout of a batch of `samples` before it is made: each ragged
  // field planned at kPlannedRaggedLength elements a sample, each collated
  // one at the shape the dataset was described with (its first dimension
  // `samples`). INVALID_ARGUMENT (FAILED_PRECONDITION over `max_bytes`) as
  // LayOutBatch says.
  absl::StatusOr<BatchLayout> PlannedLayout(uint32_t samples, uint64_t max_bytes) const;
  // PlannedLayout's bytes, unbounded: what a stream's batches weigh.
  uint64_t PlannedBytes(uint32_t samples) const;
  // What a batch of `samples` takes of the server's memory budget while it
  // is made and sent: PlannedBytes, or none for a source whose batches
  // share their bytes.
  virtual uint64_t ReservedBytes(uint32_t samples) const { return PlannedBytes(samples); }
  // How many items of work a batch of `samples` is: one per sample, or one
  // for a batch made whole.
  virtual int Items(uint32_t samples) const { return static_cast<int>(samples); }
  // The estimated work of one item of a batch of `samples` (pixel
  // operations, or a count of samples): the pool shares its threads
  // between clients by it.
  virtual double ItemCost(uint32_t samples) const = 0;
  // What DatasetInfo says of its batches: fields, image shape, a Python
  // dataset's sample structure.
  virtual void Describe(v1::DatasetInfo& info) const = 0;
  // Whether reading its samples waits on storage (object storage), so that
  // the reads of a batch are best started when it is asked for (Prefetch),
  // long before its turn on the decode threads.
  virtual bool reads_ahead() const { return false; }
  // Starts reading `indices` (a batch asked for) ahead; nothing by default.
  // `block_plan`: the batch is a block-shuffled plan's (src/plan/epoch_plan.h),
  // whose next batches take the samples beside these in their shards.
  virtual void Prefetch(absl::Span<const int64_t> /*indices*/, bool /*block_plan*/) const {}
  // Starts `request`'s batch, its payload from `payload` (which outlives
  // the returned batch). The request's indices must outlive it too.
  virtual absl::StatusOr<std::unique_ptr<SourceBatch>> Start(const BatchRequestSpec& request,
                                                             BatchPayload& payload) const = 0;
};

// Elements a sample is planned to have in each ragged field before its
// batch is made: what a batch's buffer and memory are reserved for (a COCO
// image has 7 objects on average); a batch with more grows as it finishes.
inline constexpr uint32_t kPlannedRaggedLength = 32;

// Writes `slots` as a header's per-sample fields: labels and planned
// indices, statuses, the failed and decoded-with-warnings counts, and when
// any failed, every slot's source and each failed slot's reason.
void WriteSlots(const std::vector<SlotResult>& slots, v1::Batch& header);

// A batch's payload once the ragged lengths in `header` are known: the
// dense fields of `fields` where `planned` (its planned layout) put them,
// the ragged ones after (the gaps zeroed), moved into a larger buffer from
// `payload` (the dense bytes copied) when the elements are more than
// planned, and the payload truncated to the layout's bytes. `data` is the
// payload's start, and moves with it. The layout's error when the elements
// do not fit max_batch_bytes.
absl::StatusOr<BatchLayout> LayOutRagged(const FieldSpecs& fields, const v1::Batch& header,
                                         const BatchLayout& planned, uint64_t max_batch_bytes,
                                         BatchPayload& payload, uint8_t*& data);

// The field of `layout` called `name`, or null.
const FieldSlice* FindField(const BatchLayout& layout, absl::string_view name);

// What a data server serves: one dataset, described, and the batch source
// each pipeline a stream names makes of it.
class DatasetSources {
 public:
  virtual ~DatasetSources() = default;

  virtual uint64_t fingerprint() const = 0;
  virtual size_t num_samples() const = 0;
  // Where it is read from (a path, a Python spec), for messages and stats.
  virtual const std::string& name() const = 0;
  // The samples of each of its shards, in order (Dataset::shard_sizes);
  // empty when it has none, and then no block-shuffled plan is made of it.
  virtual std::vector<uint64_t> shard_sizes() const { return {}; }
  // Streams naming no pipeline get default_source(); default_pipeline() is
  // its spec, empty when a dataset's samples are its own code's.
  virtual std::string default_pipeline() const = 0;
  virtual std::shared_ptr<const BatchSource> default_source() const = 0;
  // A new source for streams naming `pipeline` (not empty). INVALID_ARGUMENT
  // when it does not parse, does not apply to the dataset, or costs more
  // than the server allows.
  virtual absl::StatusOr<std::shared_ptr<const BatchSource>> Make(
      const std::string& pipeline) const = 0;
  // DatasetInfo's dataset parts: identity, class names.
  virtual void Describe(v1::DatasetInfo& info) const = 0;
  // Pipelines Make() refused as too costly, since start.
  virtual uint64_t pipelines_refused_costly() const { return 0; }
  // The server is stopping: samples being made return at once.
  virtual void Stop() {}
};

}  // namespace heterodl

#endif  // HETERODL_SRC_DATA_BATCH_SOURCE_H_
