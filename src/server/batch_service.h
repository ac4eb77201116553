// BatchService: the data server's logic, free of gRPC. It validates what
// clients ask for and builds batches on a worker pool, every batch by all of
// its threads (src/server/sample_pool.h); data_service_handlers.h and
// batch_stream_reactor.h adapt it to the DataService RPCs.
//
//   BatchService service(std::move(dataset), std::move(pipeline), threads);
//   ASSIGN_OR_RETURN(auto stream, service.OpenStream(open_request));
//   RETURN_IF_ERROR(service.ValidateBatchId(*stream, id));
//   service.BuildAsync(stream, id, [](absl::StatusOr<BuiltBatch> batch) {...});
//   service.CloseStream(*stream);  // when the stream ends
#ifndef HETERODL_SRC_SERVER_BATCH_SERVICE_H_
#define HETERODL_SRC_SERVER_BATCH_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "augment/pipeline.h"
#include "heterodl/data_service.pb.h"
#include "src/common/memory/buffer_pool.h"
#include "src/data/batch_assembler.h"
#include "src/data/dataset.h"
#include "src/data/epoch_plan.h"
#include "src/data/python/python_dataset.h"
#include "src/server/memory_budget.h"
#include "src/server/recent_rate.h"
#include "src/server/sample_pool.h"
#include "src/server/shared_lru_cache.h"
#include "src/wire/outgoing_pixels.h"

namespace heterodl {

// Limits on what one client may ask for. Requests beyond them are refused
// with INVALID_ARGUMENT, so a client cannot make a server allocate without
// bound.
struct RequestLimits {
  uint32_t max_batch_size = 4096;
  uint32_t max_world_size = 65536;
  uint32_t max_epoch = kMaxEpoch;
  uint64_t max_batch_bytes = 1ull << 30;
  // A pipeline's estimated work per sample (PipelineCost::pixel_operations):
  // about half a second of a core. Real pipelines cost a few million; one
  // blur of 255 pixels on an 8192-pixel image costs 46 billion.
  double max_sample_pixel_operations = 2e9;
  // And what all clients together may hold: bytes of batches asked for and
  // not yet sent, over all streams (MemoryBudget); 0:
  // DefaultMemoryBudgetBytes().
  uint64_t memory_budget_bytes = 0;
};

// OK when `pipeline`'s estimated cost per sample is within `limit`; else
// INVALID_ARGUMENT saying which operation costs most and why.
absl::Status CheckPipelineCost(const Pipeline& pipeline, double limit);

// What one open stream builds batches for: its validated plan parameters,
// the assembler of its pipeline, and its turn on the worker pool.
struct StreamPlan {
  PlanParams params;
  // Shared with the service's cache of pipelines, which keeps it while
  // there is room; the stream keeps it as long as it lives.
  std::shared_ptr<const BatchAssembler> assembler;
  // What its batches hold (DatasetInfo.fields): images, and masks for a
  // segmentation dataset.
  google::protobuf::RepeatedPtrField<v1::FieldSpec> fields;
  // Its client's queue on the pool, and what drops this stream's builds.
  std::string client_id;
  SamplePool::QueueId work_queue = 0;
  // Its pipeline's estimated work per sample: the pool shares its threads
  // between clients by it.
  double sample_cost = 1;
  // Set when the stream ends: its builds not yet started are dropped.
  std::shared_ptr<std::atomic<bool>> closed = std::make_shared<std::atomic<bool>>(false);
  // Set when no one will receive its batches: samples being built stop
  // before their next step (see BatchRequestSpec::abandoned).
  std::shared_ptr<std::atomic<bool>> abandoned = std::make_shared<std::atomic<bool>>(false);
};

// The fields of `assembler`'s batches, as DatasetInfo.fields declares them.
google::protobuf::RepeatedPtrField<v1::FieldSpec> FieldsOf(const BatchAssembler& assembler);

// INVALID_ARGUMENT when `pipeline` makes several views of a sample and
// `dataset` is not one of images and labels alone (masks, boxes, synthetic).
absl::Status CheckViewsFit(const Pipeline& pipeline, const Dataset& dataset);

// A built batch: the message fields, and its payload, every field's bytes
// (sent without a copy, see src/wire/batch_codec.h).
struct BuiltBatch {
  v1::Batch header;  // `images` empty
  OutgoingPixels pixels;
};

// The longest pipeline spec a client may name: a real one is a few hundred
// bytes; this bounds what one request can make a server parse and keep.
inline constexpr size_t kMaxPipelineSpecBytes = 16 << 10;

class BatchService {
 public:
  // `default_pipeline` serves streams that name no pipeline.
  // `pipeline_options` apply to the pipelines that streams name, too.
  // `worker_nice`: see SamplePool. `buffer_allocator`: where batches are
  // built (the heap by default; shared memory for same-host loaders).
  BatchService(Dataset dataset, Pipeline default_pipeline, int threads, RequestLimits limits = {},
               PipelineOptions pipeline_options = {}, int worker_nice = 0,
               HostAllocator buffer_allocator = {});
  // Serves a user's own Python dataset: its samples are made by `python`'s
  // worker processes, one thread here per worker, into buffers from
  // `buffer_allocator`, which must be the shared regions `python` was
  // started with. Streams may name no pipeline.
  BatchService(std::shared_ptr<PythonDataset> python, RequestLimits limits,
               HostAllocator buffer_allocator);
  ~BatchService();

  // The dataset, and `pipeline`'s output shape (the default pipeline's when
  // empty). INVALID_ARGUMENT with the parser's message when `pipeline` does
  // not parse.
  absl::StatusOr<v1::DatasetInfo> Info(const std::string& pipeline = "") ABSL_LOCKS_EXCLUDED(mu_);

  // Validates a stream's PlanConfig: fingerprint (FAILED_PRECONDITION naming
  // both fingerprints on mismatch), sizes within limits, pipeline spec
  // (INVALID_ARGUMENT with the parser's message, or naming the operation
  // that makes it cost more than the limit), a client id of at most 64
  // bytes. The stream's builds go to its client's queue on the worker pool
  // (its own when `client_id` is empty), which shares the threads fairly
  // with the other clients'. CloseStream() ends it.
  absl::StatusOr<std::shared_ptr<const StreamPlan>> OpenStream(const v1::PlanConfig& config,
                                                               const std::string& client_id = "")
      ABSL_LOCKS_EXCLUDED(mu_);
  // Drops the stream's builds that have not started (their `done` gets
  // CANCELLED from a worker); with `abandon`, the batches being built stop
  // too (no one will receive them), else they are finished. Idempotent;
  // never blocks.
  void CloseStream(const StreamPlan& stream, bool abandon = true) ABSL_LOCKS_EXCLUDED(mu_);

  // INVALID_ARGUMENT unless `id` names a batch of the stream's plan.
  absl::Status ValidateBatchId(const StreamPlan& stream, const v1::BatchId& id) const;

  // Builds batch `id` on the worker pool, its samples spread over all
  // threads, and passes it to `done` (on a worker thread, once):
  // RESOURCE_EXHAUSTED when no memory is left for it, CANCELLED when the
  // stream was closed before it started or abandoned before it finished.
  // The batch's bytes are reserved from the memory budget first, and held
  // until its pixels are sent: it waits for them behind earlier batches
  // when they are not free (a batch that never fits is refused at
  // OpenStream). Batches of one stream are built in the order
  // asked. REQUIRES: ValidateBatchId(stream, id) is OK.
  void BuildAsync(std::shared_ptr<const StreamPlan> stream, const v1::BatchId& id,
                  std::function<void(absl::StatusOr<BuiltBatch>)> done);

  v1::ServerStats Stats() ABSL_LOCKS_EXCLUDED(mu_);
  MemoryBudget::Stats MemoryStats() const { return memory_->GetStats(); }
  // How the dataset's masks' ids go in batches (kNone without masks).
  MaskIds mask_ids() const { return mask_ids_; }

 private:
  // (seed, world_size, batch_size, drop_last, shuffle, epoch)
  using PlanKey = std::tuple<uint64_t, uint32_t, uint32_t, bool, bool, uint32_t>;

  struct BatchJob;

  // A detection batch's objects, sample after sample, and how many each has.
  struct RaggedValues {
    std::vector<uint32_t> lengths;
    std::vector<float> boxes;  // 4 a box, xyxy
    std::vector<int64_t> labels;
    std::vector<uint8_t> crowd;
    void Add(const SlotResult& slot);
  };

  // A named pipeline, parsed, with its assembler (which refers to it).
  struct CompiledPipeline {
    CompiledPipeline(const Dataset& dataset, Pipeline parsed, MaskIds mask_ids)
        : pipeline(std::move(parsed)), assembler(dataset, pipeline, mask_ids) {}
    const Pipeline pipeline;
    const BatchAssembler assembler;
  };

  // The assembler of `pipeline` (the default one when empty), parsed on
  // first use and cached while there is room (pipelines_). INVALID_ARGUMENT
  // for a spec over kMaxPipelineSpecBytes, one the parser refuses or one
  // over the cost limit.
  absl::StatusOr<std::shared_ptr<const BatchAssembler>> AssemblerFor(const std::string& pipeline)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::shared_ptr<const EpochPlan>> PlanFor(const PlanParams& params, uint32_t epoch)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Run by the job's first sample: the plan, the indices and the buffer.
  absl::Status Prepare(BatchJob& job) ABSL_LOCKS_EXCLUDED(mu_);
  void BuildSample(BatchJob& job, int slot) ABSL_LOCKS_EXCLUDED(mu_);
  // A buffer for a batch of `layout`, holding the memory the job reserved,
  // its alignment gaps zeroed: job.pixels, payload and layout are set to it
  // (a buffer set before goes, with its reservation).
  absl::StatusOr<uint8_t*> AllocatePayload(BatchJob& job, BatchLayout layout);
  // Serving a Python dataset whose module has a collate_fn: a batch is one
  // item of work, made whole by BuildCollated.
  bool Collates() const { return python_ != nullptr && python_->collates(); }
  // Prepare's work for a Python dataset that collates: the whole batch,
  // made by one worker, in a buffer of the size it turned out to need.
  absl::Status BuildCollated(BatchJob& job) ABSL_LOCKS_EXCLUDED(mu_);
  // The header of a job whose samples are all built.
  absl::StatusOr<BuiltBatch> Finish(BatchJob& job) ABSL_LOCKS_EXCLUDED(mu_);
  // Lays a detection batch's objects out after its images (in a larger
  // buffer when there are more than planned) and says how many each sample
  // has in the header.
  absl::Status PlaceObjects(BatchJob& job, const RaggedValues& objects, v1::Batch& header,
                            OutgoingPixels& pixels);
  // Lays a Python dataset's ragged fields out after its dense ones (as
  // PlaceObjects does) from what each slot's sample returned.
  absl::Status PlacePythonRagged(BatchJob& job, const std::vector<SlotResult>& slots,
                                 v1::Batch& header, OutgoingPixels& pixels);
  // The layout of a batch whose header has its ragged lengths: the dense
  // fields where they were planned, the ragged ones after them (zeros in
  // the gaps), in a larger buffer (`pixels` and job.payload move there)
  // when the elements are more than planned.
  absl::StatusOr<BatchLayout> LayOutRagged(BatchJob& job, const v1::Batch& header,
                                           OutgoingPixels& pixels);
  // The pre-built pixels of a synthetic batch of these indices' size.
  std::shared_ptr<const std::vector<uint8_t>> SyntheticPixels(const BatchAssembler& assembler,
                                                              absl::Span<const int64_t> indices)
      ABSL_LOCKS_EXCLUDED(mu_);

  const Dataset dataset_;  // empty when serving a Python dataset
  // Null unless serving a user's own Python dataset.
  const std::shared_ptr<PythonDataset> python_;
  // What clients see of either dataset.
  const uint64_t fingerprint_;
  const size_t num_samples_;
  const std::string source_;
  // Batches of a synthetic dataset: shared pixels, built once.
  const bool synthetic_;
  // How its masks' ids go in batches (MaskIdsOf).
  const MaskIds mask_ids_;
  const Pipeline default_pipeline_;
  const BatchAssembler default_assembler_;
  const RequestLimits limits_;
  const PipelineOptions pipeline_options_;
  const absl::Time start_time_;
  // Batch buffers, reused once gRPC has sent them.
  const std::shared_ptr<BufferPool> buffers_;
  // What the batches of all streams may hold at once.
  const std::shared_ptr<MemoryBudget> memory_;

  mutable absl::Mutex mu_;
  // Pipelines other than the default, by spec: those no stream uses make
  // room for new ones, so no sequence of requests fills it for good.
  SharedLruCache<CompiledPipeline> pipelines_ ABSL_GUARDED_BY(mu_);
  // Recently used epoch plans; a few epochs of a few clients.
  std::map<PlanKey, std::shared_ptr<const EpochPlan>> plans_ ABSL_GUARDED_BY(mu_);
  // The pool queue of each client with streams open, and how many.
  std::map<std::string, std::pair<SamplePool::QueueId, int>> client_queues_ ABSL_GUARDED_BY(mu_);
  std::deque<PlanKey> plan_order_ ABSL_GUARDED_BY(mu_);
  // A synthetic dataset's batches are all alike: built once per byte size and
  // sent again and again (what `bench transport` measures is the wire).
  std::map<size_t, std::shared_ptr<const std::vector<uint8_t>>> synthetic_batches_
      ABSL_GUARDED_BY(mu_);
  double read_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  double decode_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  double augment_seconds_ ABSL_GUARDED_BY(mu_) = 0;

  std::atomic<uint64_t> batches_built_{0};
  std::atomic<uint64_t> samples_built_{0};
  RecentRate recent_samples_{absl::Seconds(10)};
  std::atomic<uint64_t> samples_failed_{0};
  std::atomic<uint64_t> samples_replaced_{0};
  std::atomic<uint64_t> samples_warned_{0};  // decoded around damage
  std::atomic<uint64_t> pipelines_refused_costly_{0};

  // Last member: destroyed first, so running builds finish while the rest of
  // the service is still alive.
  SamplePool pool_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_SERVER_BATCH_SERVICE_H_
