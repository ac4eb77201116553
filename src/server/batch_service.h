// BatchService: the data server's scheduling, free of gRPC. It validates
// what clients ask for, keeps the caches (each pipeline's batch source, the
// epoch plans), and builds each batch on the worker pool, its items spread
// over all threads (src/server/sample_pool.h), within the memory budget;
// what a batch is and how its items are made is its source's
// (src/data/batch_source.h). data_service_handlers.h and
// batch_stream_reactor.h adapt it to the DataService RPCs.
//
//   BatchService service(std::make_unique<NativeSources>(...), threads);
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
#include "heterodl/data_service.pb.h"
#include "src/common/memory/buffer_pool.h"
#include "src/data/batch_source.h"
#include "src/plan/epoch_plan.h"
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

// What one open stream builds batches for: its validated plan parameters,
// its pipeline's batch source, and its turn on the worker pool.
struct StreamPlan {
  PlanParams params;
  // Shared with the service's cache of sources, which keeps it while there
  // is room; the stream keeps it as long as it lives.
  std::shared_ptr<const BatchSource> source;
  // Its client's queue on the pool, and what drops this stream's builds.
  std::string client_id;
  SamplePool::QueueId work_queue = 0;
  // The estimated work of one item of its batches: the pool shares its
  // threads between clients by it.
  double item_cost = 1;
  // Set when the stream ends: its builds not yet started are dropped.
  std::shared_ptr<std::atomic<bool>> closed = std::make_shared<std::atomic<bool>>(false);
  // Set when no one will receive its batches: samples being built stop
  // before their next step (see BatchRequestSpec::abandoned).
  std::shared_ptr<std::atomic<bool>> abandoned = std::make_shared<std::atomic<bool>>(false);
};

// How many batches one stream may have requested and not yet received: as
// many of its planned bytes (its own source's, for `batch_size` samples) as
// `max_stream_bytes` holds, at least 1 and at most `most`.
int StreamWindow(const BatchSource& source, uint32_t batch_size, uint64_t max_stream_bytes,
                 int most);

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
  // Serves `sources`' dataset with `threads` workers (a Python dataset's:
  // one per worker process). `worker_nice`: see SamplePool.
  // `buffer_allocator`: where batches are built (the heap by default;
  // shared memory for same-host loaders, and for a Python dataset the
  // shared regions its workers write to).
  BatchService(std::unique_ptr<DatasetSources> sources, int threads, RequestLimits limits = {},
               int worker_nice = 0, HostAllocator buffer_allocator = {});
  ~BatchService();

  // The dataset, and `pipeline`'s batches (the default pipeline's when
  // empty). INVALID_ARGUMENT with the parser's message when `pipeline` does
  // not parse or does not apply.
  absl::StatusOr<v1::DatasetInfo> Info(const std::string& pipeline = "") ABSL_LOCKS_EXCLUDED(mu_);

  // Validates a stream's PlanConfig: fingerprint (FAILED_PRECONDITION naming
  // both fingerprints on mismatch), sizes within limits, pipeline spec
  // (INVALID_ARGUMENT with the parser's message, or naming the operation
  // that makes it cost more than the limit), a client id of at most 64
  // bytes, a batch that fits the memory budget (RESOURCE_EXHAUSTED). The
  // stream's builds go to its client's queue on the worker pool (its own
  // when `client_id` is empty), which shares the threads fairly with the
  // other clients'. CloseStream() ends it.
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

  // Builds batch `id` on the worker pool, its items spread over all
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

 private:
  // (seed, world_size, batch_size, drop_last, shuffle, shuffle_block_shards,
  // epoch_offset, epoch); the shards' sizes are the dataset's.
  using PlanKey =
      std::tuple<uint64_t, uint32_t, uint32_t, bool, bool, uint32_t, uint64_t, uint32_t>;

  // A batch on its way through the pool (and the payload its source fills).
  class BatchJob;

  // The source of `pipeline` (the default one when empty), made on first
  // use and cached while there is room (sources_). INVALID_ARGUMENT for a
  // spec over kMaxPipelineSpecBytes, or the sources' refusal.
  absl::StatusOr<std::shared_ptr<const BatchSource>> SourceFor(const std::string& pipeline)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::shared_ptr<const EpochPlan>> PlanFor(const PlanParams& params, uint32_t epoch)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Run by the job's first item: the plan, the indices, the source's batch.
  absl::Status Prepare(BatchJob& job) ABSL_LOCKS_EXCLUDED(mu_);
  // The batch of a job whose items all ran.
  absl::StatusOr<BuiltBatch> Finish(BatchJob& job) ABSL_LOCKS_EXCLUDED(mu_);

  const std::unique_ptr<DatasetSources> sources_;
  const RequestLimits limits_;
  const absl::Time start_time_;
  // Batch buffers, reused once gRPC has sent them.
  const std::shared_ptr<BufferPool> buffers_;
  // What the batches of all streams may hold at once.
  const std::shared_ptr<MemoryBudget> memory_;

  mutable absl::Mutex mu_;
  // Sources of pipelines other than the default, by spec: those no stream
  // uses make room for new ones, so no sequence of requests fills it for
  // good.
  SharedLruCache<BatchSource> named_sources_ ABSL_GUARDED_BY(mu_);
  // Recently used epoch plans; a few epochs of a few clients.
  std::map<PlanKey, std::shared_ptr<const EpochPlan>> plans_ ABSL_GUARDED_BY(mu_);
  std::deque<PlanKey> plan_order_ ABSL_GUARDED_BY(mu_);
  // The pool queue of each client with streams open, and how many.
  std::map<std::string, std::pair<SamplePool::QueueId, int>> client_queues_ ABSL_GUARDED_BY(mu_);
  double read_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  double decode_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  double augment_seconds_ ABSL_GUARDED_BY(mu_) = 0;

  std::atomic<uint64_t> batches_built_{0};
  std::atomic<uint64_t> samples_built_{0};
  RecentRate recent_samples_{absl::Seconds(10)};
  std::atomic<uint64_t> samples_failed_{0};
  std::atomic<uint64_t> samples_replaced_{0};
  std::atomic<uint64_t> samples_warned_{0};  // decoded around damage

  // Last member: destroyed first, so running builds finish while the rest of
  // the service is still alive.
  SamplePool pool_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_SERVER_BATCH_SERVICE_H_
