#include "src/server/batch_service.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/base/call_once.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/common/fingerprint.h"
#include "src/common/process/process_stats.h"
#include "src/common/status_macros.h"
#include "src/wire/plan_config.h"

namespace heterodl {
namespace {

constexpr size_t kMaxCachedPlans = 16;
constexpr size_t kMaxClientIdBytes = 64;
// The cache of the sources of pipelines streams name: entries and bytes (of
// specs, and what parsing makes of them, about as much again and a page).
constexpr size_t kMaxCachedPipelines = 64;
constexpr uint64_t kMaxCachedPipelineBytes = uint64_t{16} << 20;

// A batch's buffer, with what it holds of the memory budget (the first
// one's grant), or the buffer it outgrew (whose bytes stay readable until
// this one is sent).
struct BatchMemory {
  PooledBuffer buffer;
  MemoryBudget::Grant reserved;
  std::shared_ptr<const void> outgrown;
};

}  // namespace

int StreamWindow(const BatchSource& source, uint32_t batch_size, uint64_t max_stream_bytes,
                 int most) {
  const uint64_t batch_bytes = std::max<uint64_t>(source.PlannedBytes(batch_size), 1);
  return static_cast<int>(
      std::clamp<uint64_t>(max_stream_bytes / batch_bytes, 1, static_cast<uint64_t>(most)));
}

// One batch on its way through the pool: set up by its first item, filled by
// any workers, finished by the last. Its source writes the payload through
// it (BatchPayload): buffers from the service's pool, the first holding the
// memory the build reserved.
class BatchService::BatchJob final : public BatchPayload {
 public:
  BatchJob(BatchService& service, std::shared_ptr<const StreamPlan> stream, v1::BatchId id,
           std::function<void(absl::StatusOr<BuiltBatch>)> done)
      : service(service),
        stream(std::move(stream)),
        id(std::move(id)),
        requested(absl::Now()),
        done(std::move(done)) {}

  // BatchPayload: called by the source while it starts and finishes the
  // batch, never concurrently.
  absl::StatusOr<uint8_t*> Allocate(const BatchLayout& layout) override {
    // At least a little: a collated batch that could not be made has no bytes.
    ASSIGN_OR_RETURN(PooledBuffer buffer, service.buffers_->Get(std::max<uint64_t>(
                                              layout.payload_bytes, kFieldAlignment)));
    auto memory = std::make_shared<BatchMemory>(
        BatchMemory{std::move(buffer), std::move(reserved), std::move(pixels.owner)});
    uint8_t* data = memory->buffer.data();
    // The gaps that align fields would carry a pooled buffer's earlier bytes
    // (another client's pixels): zeros instead.
    uint64_t end = 0;
    for (const FieldSlice& field : layout.fields) {
      std::memset(data + end, 0, field.offset - end);
      end = field.offset + field.bytes;
    }
    pixels = OutgoingPixels{std::move(memory), data, layout.payload_bytes};
    return data;
  }
  void Share(std::shared_ptr<const std::vector<uint8_t>> bytes) override {
    pixels = OutgoingPixels::Share(std::move(bytes));
  }
  void Truncate(uint64_t bytes) override { pixels.size = std::min(pixels.size, bytes); }

  BatchService& service;
  const std::shared_ptr<const StreamPlan> stream;
  const v1::BatchId id;
  const absl::Time requested;
  const std::function<void(absl::StatusOr<BuiltBatch>)> done;
  // The batch's bytes, from the memory budget; they go with its pixels.
  MemoryBudget::Grant reserved;

  absl::once_flag prepare_once;
  // Set once by Prepare, read-only after.
  absl::Status prepared;
  absl::Time started;
  std::vector<int64_t> indices;
  std::unique_ptr<SourceBatch> batch;
  OutgoingPixels pixels;
};

BatchService::BatchService(std::unique_ptr<DatasetSources> sources, int threads,
                           RequestLimits limits, int worker_nice, HostAllocator buffer_allocator)
    : sources_(std::move(sources)),
      limits_(limits),
      start_time_(absl::Now()),
      buffers_(
          BufferPool::Create(2 * static_cast<size_t>(threads) + 4, std::move(buffer_allocator))),
      memory_(MemoryBudget::Create(limits.memory_budget_bytes > 0 ? limits.memory_budget_bytes
                                                                  : DefaultMemoryBudgetBytes())),
      named_sources_(kMaxCachedPipelines, kMaxCachedPipelineBytes),
      pool_(threads, worker_nice) {}

BatchService::~BatchService() {
  // Samples being made return at once (a Python dataset's workers are
  // stopped), so the pool's threads can end.
  sources_->Stop();
  // Waiting builds refer to this service: they are dropped, and a grant
  // released later (pixels still being sent) starts none.
  memory_->Close();
}

absl::StatusOr<v1::DatasetInfo> BatchService::Info(const std::string& pipeline) {
  ASSIGN_OR_RETURN(const std::shared_ptr<const BatchSource> source, SourceFor(pipeline));
  v1::DatasetInfo info;
  sources_->Describe(info);
  source->Describe(info);
  return info;
}

absl::StatusOr<std::shared_ptr<const BatchSource>> BatchService::SourceFor(
    const std::string& pipeline) {
  if (pipeline.empty()) {
    return sources_->default_source();
  }
  if (pipeline.size() > kMaxPipelineSpecBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline spec of ", pipeline.size(), " bytes, over the limit of ", kMaxPipelineSpecBytes));
  }
  {
    absl::MutexLock lock(&mu_);
    if (std::shared_ptr<const BatchSource> cached = named_sources_.Get(pipeline)) {
      return cached;
    }
  }
  // Outside the lock: a long spec takes a while to parse.
  ASSIGN_OR_RETURN(std::shared_ptr<const BatchSource> made, sources_->Make(pipeline));
  absl::MutexLock lock(&mu_);
  return named_sources_.Put(pipeline, std::move(made), 2 * pipeline.size() + 4096);
}

absl::StatusOr<std::shared_ptr<const StreamPlan>> BatchService::OpenStream(
    const v1::PlanConfig& config, const std::string& client_id) {
  if (client_id.size() > kMaxClientIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("client_id of ", client_id.size(), " bytes, over ", kMaxClientIdBytes));
  }
  if (config.dataset_fingerprint() != sources_->fingerprint()) {
    return absl::FailedPreconditionError(
        absl::StrCat("dataset mismatch: the client expects fingerprint ",
                     FingerprintToHex(config.dataset_fingerprint()), " but this server's dataset '",
                     sources_->name(), "' has ", FingerprintToHex(sources_->fingerprint())));
  }
  if (config.batch_size() == 0 || config.batch_size() > limits_.max_batch_size) {
    return absl::InvalidArgumentError(absl::StrCat("batch_size ", config.batch_size(),
                                                   " outside [1, ", limits_.max_batch_size, "]"));
  }
  if (config.world_size() == 0 || config.world_size() > limits_.max_world_size) {
    return absl::InvalidArgumentError(absl::StrCat("world_size ", config.world_size(),
                                                   " outside [1, ", limits_.max_world_size, "]"));
  }
  auto stream = std::make_shared<StreamPlan>();
  stream->params = FromPlanConfig(config, sources_->num_samples(), sources_->shard_sizes());
  RETURN_IF_ERROR(BatchesPerRank(stream->params).status());
  if (absl::Status block = CheckBlockShuffle(stream->params); !block.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset '", sources_->name(), "': ", block.message()));
  }

  ASSIGN_OR_RETURN(stream->source, SourceFor(config.pipeline()));
  const absl::StatusOr<BatchLayout> layout =
      stream->source->PlannedLayout(config.batch_size(), limits_.max_batch_bytes);
  if (!layout.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a batch of ", config.batch_size(), " samples: ", layout.status().message()));
  }
  RETURN_IF_ERROR(memory_->Fits(stream->source->ReservedBytes(config.batch_size())));
  stream->client_id = client_id;
  stream->item_cost = stream->source->ItemCost(config.batch_size());
  if (client_id.empty()) {
    stream->work_queue = pool_.OpenQueue();
    return stream;
  }
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = client_queues_.try_emplace(client_id, 0, 0);
  if (inserted) {
    it->second.first = pool_.OpenQueue();
  }
  ++it->second.second;
  stream->work_queue = it->second.first;
  return stream;
}

void BatchService::CloseStream(const StreamPlan& stream, bool abandon) {
  if (abandon) {
    stream.abandoned->store(true);
  }
  if (stream.closed->exchange(true)) {
    return;  // closed before
  }
  // After `closed`: the pool drops what the waiters then submit.
  memory_->CancelWaiting(&stream);
  if (stream.client_id.empty()) {
    return pool_.CloseQueue(stream.work_queue);
  }
  absl::MutexLock lock(&mu_);
  auto it = client_queues_.find(stream.client_id);
  if (it == client_queues_.end() || --it->second.second > 0) {
    return;
  }
  pool_.CloseQueue(it->second.first);
  client_queues_.erase(it);
}

absl::Status BatchService::ValidateBatchId(const StreamPlan& stream, const v1::BatchId& id) const {
  if (id.epoch() > limits_.max_epoch) {
    return absl::InvalidArgumentError(absl::StrCat("epoch ", id.epoch(), " over the limit"));
  }
  if (id.rank() >= stream.params.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", id.rank(), " outside world_size ", stream.params.world_size));
  }
  ASSIGN_OR_RETURN(int64_t batches, BatchesPerRank(stream.params));
  if (id.index() >= batches) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch index ", id.index(), " outside the epoch's ", batches, " batches per rank"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const EpochPlan>> BatchService::PlanFor(const PlanParams& params,
                                                                       uint32_t epoch) {
  const PlanKey key{
      params.seed,    params.world_size,           params.batch_size,   params.drop_last,
      params.shuffle, params.shuffle_block_shards, params.epoch_offset, epoch};
  {
    absl::MutexLock lock(&mu_);
    auto it = plans_.find(key);
    if (it != plans_.end()) {
      return it->second;
    }
  }
  // Built outside the lock: a permutation of a large dataset takes a while.
  ASSIGN_OR_RETURN(EpochPlan plan, EpochPlan::Create(params, epoch));
  auto shared = std::make_shared<const EpochPlan>(std::move(plan));
  absl::MutexLock lock(&mu_);
  if (plans_.emplace(key, shared).second) {
    plan_order_.push_back(key);
    if (plan_order_.size() > kMaxCachedPlans) {
      plans_.erase(plan_order_.front());
      plan_order_.pop_front();
    }
  }
  return shared;
}

void BatchService::BuildAsync(std::shared_ptr<const StreamPlan> stream, const v1::BatchId& id,
                              std::function<void(absl::StatusOr<BuiltBatch>)> done) {
  const absl::StatusOr<int64_t> samples = SamplesInBatch(stream->params, id.index());
  const auto count = static_cast<uint32_t>(samples.value_or(0));
  const int items = std::max(stream->source->Items(count), 1);
  const uint64_t bytes = stream->source->ReservedBytes(count);
  const SamplePool::QueueId queue = stream->work_queue;
  const StreamPlan* key = stream.get();
  if (stream->source->reads_ahead()) {
    // Reads that wait on storage start as the batch is asked for, a window
    // of batches ahead of its turn on the decode threads.
    if (absl::StatusOr<std::shared_ptr<const EpochPlan>> plan = PlanFor(stream->params, id.epoch());
        plan.ok()) {
      stream->source->Prefetch((*plan)->BatchIndices(id.rank(), id.index()),
                               stream->params.shuffle_block_shards > 0);
    }
  }
  auto job = std::make_shared<BatchJob>(*this, std::move(stream), id, std::move(done));
  // Runs now, or once other batches' pixels are sent; with an empty grant
  // once the stream is closed, and then the pool drops the job.
  memory_->Reserve(bytes, key, [this, job, queue, items](MemoryBudget::Grant memory) {
    job->reserved = std::move(memory);
    pool_.Submit(queue, {items,
                         [this, job](int item) {
                           absl::call_once(job->prepare_once,
                                           [&] { job->prepared = Prepare(*job); });
                           if (job->prepared.ok()) {
                             job->batch->BuildItem(item);
                           }
                         },
                         [this, job](bool completed) {
                           if (!completed) {
                             job->done(absl::CancelledError("the stream ended first"));
                           } else if (!job->prepared.ok()) {
                             job->done(job->prepared);
                           } else {
                             job->done(Finish(*job));
                           }
                         },
                         job->stream->closed, job->stream->item_cost});
  });
  // A stream closed while this was being queued: CloseStream may have
  // cancelled its waiters before this one was among them.
  if (key->closed->load()) {
    memory_->CancelWaiting(key);
  }
}

absl::Status BatchService::Prepare(BatchJob& job) {
  job.started = absl::Now();
  ASSIGN_OR_RETURN(std::shared_ptr<const EpochPlan> plan,
                   PlanFor(job.stream->params, job.id.epoch()));
  job.indices = plan->BatchIndices(job.id.rank(), job.id.index());
  BatchRequestSpec request;
  request.seed = job.stream->params.seed;
  request.epoch = job.id.epoch();
  request.indices = job.indices;
  request.abandoned = job.stream->abandoned.get();
  request.max_batch_bytes = limits_.max_batch_bytes;
  ASSIGN_OR_RETURN(job.batch, job.stream->source->Start(request, job));
  return absl::OkStatus();
}

absl::StatusOr<BuiltBatch> BatchService::Finish(BatchJob& job) {
  if (job.stream->abandoned->load()) {
    // Some samples may have stopped half-way: not a batch, and not counted.
    return absl::CancelledError("the stream ended first");
  }
  const absl::Time finished = absl::Now();
  BuiltBatch built;
  v1::Batch& header = built.header;
  *header.mutable_id() = job.id;
  header.set_queue_seconds(absl::ToDoubleSeconds(job.started - job.requested));
  header.set_build_seconds(absl::ToDoubleSeconds(finished - job.started));
  RETURN_IF_ERROR(job.batch->Finish(header));
  built.pixels = std::move(job.pixels);

  uint64_t replaced = 0;
  for (const int status : header.status()) {
    replaced += status == v1::SAMPLE_REPLACED ? 1 : 0;
  }
  batches_built_.fetch_add(1, std::memory_order_relaxed);
  const auto samples = static_cast<uint64_t>(header.labels_size());
  recent_samples_.Note(samples_built_.fetch_add(samples, std::memory_order_relaxed) + samples,
                       absl::Now());
  samples_failed_.fetch_add(header.failed(), std::memory_order_relaxed);
  samples_replaced_.fetch_add(replaced, std::memory_order_relaxed);
  samples_warned_.fetch_add(header.decoded_with_warnings(), std::memory_order_relaxed);
  const StageSeconds seconds = job.batch->seconds();
  absl::MutexLock lock(&mu_);
  read_seconds_ += seconds.read;
  decode_seconds_ += seconds.decode;
  augment_seconds_ += seconds.augment;
  return built;
}

v1::ServerStats BatchService::Stats() {
  v1::ServerStats stats;
  stats.set_dataset(sources_->name());
  stats.set_num_samples(sources_->num_samples());
  stats.set_default_pipeline(sources_->default_pipeline());
  stats.set_recent_images_per_second(recent_samples_.PerSecond(samples_built_.load(), absl::Now()));
  const double uptime = absl::ToDoubleSeconds(absl::Now() - start_time_);
  stats.set_uptime_seconds(uptime);
  stats.set_batches_sent(batches_built_.load());
  stats.set_samples_sent(samples_built_.load());
  stats.set_samples_failed(samples_failed_.load());
  stats.set_samples_replaced(samples_replaced_.load());
  stats.set_samples_decoded_with_warnings(samples_warned_.load());
  stats.set_images_per_second(uptime > 0 ? samples_built_.load() / uptime : 0);
  stats.set_peak_rss_bytes(PeakRssBytes());
  stats.set_worker_threads(pool_.threads());
  stats.set_pipelines_refused_costly(sources_->pipelines_refused_costly());
  const MemoryBudget::Stats memory = memory_->GetStats();
  stats.set_memory_budget_bytes(memory.capacity);
  stats.set_memory_reserved_bytes(memory.reserved);
  stats.set_memory_peak_reserved_bytes(memory.peak_reserved);
  stats.set_batches_waiting_for_memory(static_cast<uint32_t>(memory.waiting));
  stats.set_batches_waited_for_memory(memory.waited);
  absl::MutexLock lock(&mu_);
  stats.set_read_seconds(read_seconds_);
  stats.set_decode_seconds(decode_seconds_);
  stats.set_augment_seconds(augment_seconds_);
  return stats;
}

}  // namespace heterodl
