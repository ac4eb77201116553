#include "src/server/batch_service.h"

#include <cstring>
#include <limits>
#include <utility>

#include "absl/base/call_once.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "src/common/fingerprint.h"
#include "src/common/process/process_stats.h"
#include "src/common/status_macros.h"
#include "src/wire/batch_layout.h"
#include "src/wire/plan_config.h"

namespace heterodl {
namespace {

constexpr size_t kMaxCachedPlans = 16;
constexpr size_t kMaxClientIdBytes = 64;
// The cache of pipelines streams name: entries and bytes (of specs, and
// what parsing makes of them, about as much again and a page).
constexpr size_t kMaxCachedPipelines = 64;
constexpr uint64_t kMaxCachedPipelineBytes = uint64_t{16} << 20;

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

// Elements a sample is planned to have in each ragged field before its
// batch is built: what a batch's buffer and memory are reserved for (a COCO
// image has 7 objects on average); a batch with more grows at Finish.
constexpr uint32_t kPlannedRaggedLength = 32;

// The layout of a batch of `samples` of these fields before it is built:
// ragged fields of kPlannedRaggedLength a sample; collated ones of the
// shape the dataset was described with, its first dimension (the samples,
// in most collate_fns) `samples`. The dense fields come first (FieldsOf),
// so their places are the built batch's; a collated batch gets a buffer of
// its own once made.
absl::StatusOr<BatchLayout> PlannedLayout(
    const google::protobuf::RepeatedPtrField<v1::FieldSpec>& fields, uint32_t samples,
    uint64_t max_bytes) {
  google::protobuf::RepeatedPtrField<v1::RaggedLengths> lengths;
  google::protobuf::RepeatedPtrField<v1::FieldShape> shapes;
  for (const v1::FieldSpec& field : fields) {
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
  return LayOutBatch(fields, samples, lengths, shapes, max_bytes);
}

// The bytes of a batch of `samples` of the stream's, as planned.
uint64_t PayloadBytes(const StreamPlan& stream, uint32_t samples) {
  const absl::StatusOr<BatchLayout> layout =
      PlannedLayout(stream.fields, samples, std::numeric_limits<uint64_t>::max());
  return layout.ok() ? layout->payload_bytes : samples * stream.assembler->sample_bytes();
}

// Writes `values` at `slice`'s place in `payload`.
template <typename T>
void WriteField(const std::vector<T>& values, const FieldSlice& slice, uint8_t* payload) {
  std::memcpy(payload + slice.offset, values.data(), values.size() * sizeof(T));
}

}  // namespace

void BatchService::RaggedValues::Add(const SlotResult& slot) {
  lengths.push_back(static_cast<uint32_t>(slot.boxes.size()));
  for (const Box& box : slot.boxes) {
    boxes.insert(boxes.end(), {box.x1, box.y1, box.x2, box.y2});
  }
  labels.insert(labels.end(), slot.box_labels.begin(), slot.box_labels.end());
  crowd.insert(crowd.end(), slot.crowd.begin(), slot.crowd.end());
}

absl::Status CheckPipelineCost(const Pipeline& pipeline, double limit) {
  const PipelineCost cost = pipeline.EstimateCost();
  if (cost.pixel_operations <= limit) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "pipeline too costly: about %.0f million pixel operations per sample, over this server's "
      "limit of %.0f million (serve --max-pipeline-cost); most of it is operation %d, %s, on a "
      "%dx%d image (from a %dx%d photo): %.0f million",
      cost.pixel_operations / 1e6, limit / 1e6, cost.costliest_position, cost.costliest_operation,
      cost.costliest_input_width, cost.costliest_input_height, kCostReferenceWidth,
      kCostReferenceHeight, cost.costliest_pixel_operations / 1e6));
}

absl::Status CheckViewsFit(const Pipeline& pipeline, const Dataset& dataset) {
  if (!pipeline.multi_view()) {
    return absl::OkStatus();
  }
  if (dataset.has_masks() || dataset.has_boxes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a pipeline of several views takes images (and labels) alone, but this server's dataset '",
        dataset.source(), "' has ", dataset.has_masks() ? "segmentation masks" : "boxes"));
  }
  if (dataset.synthetic()) {
    return absl::InvalidArgumentError(
        "a pipeline of several views needs images to decode; this server's dataset is synthetic");
  }
  return absl::OkStatus();
}

google::protobuf::RepeatedPtrField<v1::FieldSpec> FieldsOf(const BatchAssembler& assembler) {
  const auto height = static_cast<uint32_t>(assembler.pipeline().output_height());
  const auto width = static_cast<uint32_t>(assembler.pipeline().output_width());
  google::protobuf::RepeatedPtrField<v1::FieldSpec> fields;
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

BatchService::BatchService(Dataset dataset, Pipeline default_pipeline, int threads,
                           RequestLimits limits, PipelineOptions pipeline_options, int worker_nice,
                           HostAllocator buffer_allocator)
    : dataset_(std::move(dataset)),
      fingerprint_(dataset_.fingerprint()),
      num_samples_(dataset_.size()),
      source_(dataset_.source()),
      synthetic_(dataset_.synthetic()),
      mask_ids_(MaskIdsOf(dataset_, pipeline_options.max_pixels)),
      default_pipeline_(std::move(default_pipeline)),
      default_assembler_(dataset_, default_pipeline_, mask_ids_),
      limits_(limits),
      pipeline_options_(pipeline_options),
      start_time_(absl::Now()),
      buffers_(
          BufferPool::Create(2 * static_cast<size_t>(threads) + 4, std::move(buffer_allocator))),
      memory_(MemoryBudget::Create(limits.memory_budget_bytes > 0 ? limits.memory_budget_bytes
                                                                  : DefaultMemoryBudgetBytes())),
      pipelines_(kMaxCachedPipelines, kMaxCachedPipelineBytes),
      pool_(threads, worker_nice) {}

BatchService::BatchService(std::shared_ptr<PythonDataset> python, RequestLimits limits,
                           HostAllocator buffer_allocator)
    : dataset_(Dataset::Synthetic(0, 0)),
      python_(std::move(python)),
      fingerprint_(python_->fingerprint()),
      num_samples_(python_->size()),
      source_(python_->source()),
      synthetic_(false),
      mask_ids_(MaskIds::kNone),
      // Never run: the dataset's samples are its own. The default
      // pipeline's assembler is every stream's placeholder.
      default_pipeline_(Pipeline::Parse(kDefaultPipeline).value()),
      default_assembler_(dataset_, default_pipeline_, mask_ids_),
      limits_(limits),
      start_time_(absl::Now()),
      buffers_(BufferPool::Create(2 * static_cast<size_t>(python_->workers()) + 4,
                                  std::move(buffer_allocator))),
      memory_(MemoryBudget::Create(limits.memory_budget_bytes > 0 ? limits.memory_budget_bytes
                                                                  : DefaultMemoryBudgetBytes())),
      pipelines_(kMaxCachedPipelines, kMaxCachedPipelineBytes),
      // A thread per worker, each waiting on its worker's sample.
      pool_(python_->workers(), 0) {}

BatchService::~BatchService() {
  if (python_ != nullptr) {
    // Samples being made return at once, so the pool's threads can end.
    python_->Stop();
  }
  // Waiting builds refer to this service: they are dropped, and a grant
  // released later (pixels still being sent) starts none.
  memory_->Close();
}

absl::StatusOr<v1::DatasetInfo> BatchService::Info(const std::string& pipeline) {
  ASSIGN_OR_RETURN(const std::shared_ptr<const BatchAssembler> assembler, AssemblerFor(pipeline));
  v1::DatasetInfo info;
  info.set_fingerprint(fingerprint_);
  info.set_num_samples(num_samples_);
  info.set_source(source_);
  if (python_ != nullptr) {
    *info.mutable_fields() = python_->fields();
    *info.mutable_sample_structure() = python_->structure();
    *info.mutable_class_names() = python_->class_names();
    if (python_->labelled_images()) {
      info.set_height(python_->fields()[0].shape(0));
      info.set_width(python_->fields()[0].shape(1));
    }
    return info;
  }
  for (const std::string& name : dataset_.class_names()) {
    info.add_class_names(name);
  }
  info.set_default_pipeline(default_pipeline_.CanonicalSpec());
  info.set_height(assembler->pipeline().output_height());
  info.set_width(assembler->pipeline().output_width());
  *info.mutable_fields() = FieldsOf(*assembler);
  return info;
}

absl::StatusOr<std::shared_ptr<const BatchAssembler>> BatchService::AssemblerFor(
    const std::string& pipeline) {
  if (python_ != nullptr && !pipeline.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("this server serves the Python dataset ", source_,
                     " (--python-dataset), whose samples are made by its own code: a pipeline ('",
                     pipeline.substr(0, 64), "') does not apply"));
  }
  if (pipeline.empty()) {
    // Not owned: the service outlives its streams.
    return std::shared_ptr<const BatchAssembler>(std::shared_ptr<void>(), &default_assembler_);
  }
  if (pipeline.size() > kMaxPipelineSpecBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline spec of ", pipeline.size(), " bytes, over the limit of ", kMaxPipelineSpecBytes));
  }
  std::shared_ptr<const CompiledPipeline> compiled;
  {
    absl::MutexLock lock(&mu_);
    compiled = pipelines_.Get(pipeline);
  }
  if (compiled == nullptr) {
    // Outside the lock: a long spec takes a while to parse.
    ASSIGN_OR_RETURN(Pipeline parsed, Pipeline::Parse(pipeline, pipeline_options_));
    RETURN_IF_ERROR(CheckViewsFit(parsed, dataset_));
    if (absl::Status within = CheckPipelineCost(parsed, limits_.max_sample_pixel_operations);
        !within.ok()) {
      pipelines_refused_costly_.fetch_add(1, std::memory_order_relaxed);
      return within;
    }
    auto built = std::make_shared<const CompiledPipeline>(dataset_, std::move(parsed), mask_ids_);
    absl::MutexLock lock(&mu_);
    compiled = pipelines_.Put(pipeline, std::move(built), 2 * pipeline.size() + 4096);
  }
  // Shares the compiled pipeline's ownership.
  return std::shared_ptr<const BatchAssembler>(compiled, &compiled->assembler);
}

absl::StatusOr<std::shared_ptr<const StreamPlan>> BatchService::OpenStream(
    const v1::PlanConfig& config, const std::string& client_id) {
  if (client_id.size() > kMaxClientIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("client_id of ", client_id.size(), " bytes, over ", kMaxClientIdBytes));
  }
  if (config.dataset_fingerprint() != fingerprint_) {
    return absl::FailedPreconditionError(
        absl::StrCat("dataset mismatch: the client expects fingerprint ",
                     FingerprintToHex(config.dataset_fingerprint()), " but this server's dataset '",
                     source_, "' has ", FingerprintToHex(fingerprint_)));
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
  stream->params = FromPlanConfig(config, num_samples_);
  RETURN_IF_ERROR(BatchesPerRank(stream->params).status());

  ASSIGN_OR_RETURN(stream->assembler, AssemblerFor(config.pipeline()));
  stream->fields = python_ != nullptr ? python_->fields() : FieldsOf(*stream->assembler);
  const absl::StatusOr<BatchLayout> layout =
      PlannedLayout(stream->fields, config.batch_size(), limits_.max_batch_bytes);
  if (!layout.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a batch of ", config.batch_size(), " samples: ", layout.status().message()));
  }
  const uint64_t batch_bytes = layout->payload_bytes;
  if (!synthetic_) {
    RETURN_IF_ERROR(memory_->Fits(batch_bytes));
  }
  stream->client_id = client_id;
  stream->sample_cost = python_ == nullptr
                            ? stream->assembler->pipeline().EstimateCost().pixel_operations
                        : python_->collates() ? config.batch_size()  // an item is a whole batch
                                              : 1;
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
  const PlanKey key{params.seed,      params.world_size, params.batch_size,
                    params.drop_last, params.shuffle,    epoch};
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

// One batch on its way through the pool: set up by its first sample, filled
// slot by slot by any worker, finished by the last.
struct BatchService::BatchJob {
  std::shared_ptr<const StreamPlan> stream;
  v1::BatchId id;
  absl::Time requested;
  std::function<void(absl::StatusOr<BuiltBatch>)> done;
  // The batch's bytes, from the memory budget; they go with its pixels.
  MemoryBudget::Grant memory;

  absl::once_flag prepare_once;
  // Set once by Prepare, read-only after.
  absl::Status prepared;
  absl::Time started;
  std::vector<int64_t> indices;
  OutgoingPixels pixels;
  // Into `pixels`; null for a shared synthetic batch.
  BatchDestination destination;
  uint8_t* payload = nullptr;  // the start of `pixels`, writable
  BatchLayout layout;          // where its fields lie in `pixels`

  absl::Mutex mu;
  std::vector<SlotResult> slots ABSL_GUARDED_BY(mu);
  // A collated batch's Batch.collated_shapes.
  google::protobuf::RepeatedPtrField<v1::FieldShape> collated_shapes ABSL_GUARDED_BY(mu);
  StageSeconds seconds ABSL_GUARDED_BY(mu);
};

void BatchService::BuildAsync(std::shared_ptr<const StreamPlan> stream, const v1::BatchId& id,
                              std::function<void(absl::StatusOr<BuiltBatch>)> done) {
  auto job = std::make_shared<BatchJob>();
  job->requested = absl::Now();
  job->id = id;
  job->done = std::move(done);
  // A synthetic batch is shared pixels and a list of labels: one item.
  const absl::StatusOr<int64_t> samples = SamplesInBatch(stream->params, id.index());
  // A collated batch is made whole by one Python worker: one item too.
  const bool whole = synthetic_ || Collates();
  const int items = whole ? 1 : static_cast<int>(samples.value_or(1));
  const SamplePool::QueueId queue = stream->work_queue;
  const uint64_t bytes =
      synthetic_ ? 0 : PayloadBytes(*stream, static_cast<uint32_t>(samples.value_or(0)));
  const StreamPlan* key = stream.get();
  job->stream = std::move(stream);
  // Runs now, or once other batches' pixels are sent; with an empty grant
  // once the stream is closed, and then the pool drops the job.
  memory_->Reserve(bytes, key, [this, job, queue, items](MemoryBudget::Grant memory) {
    job->memory = std::move(memory);
    pool_.Submit(queue, {std::max(items, 1),
                         [this, job](int slot) {
                           absl::call_once(job->prepare_once,
                                           [&] { job->prepared = Prepare(*job); });
                           if (job->prepared.ok()) {
                             BuildSample(*job, slot);
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
                         job->stream->closed, job->stream->sample_cost});
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
  const BatchAssembler& assembler = *job.stream->assembler;
  {
    absl::MutexLock lock(&job.mu);
    job.slots.resize(job.indices.size());
  }
  if (synthetic_) {
    job.pixels = OutgoingPixels::Share(SyntheticPixels(assembler, job.indices));
    return absl::OkStatus();
  }
  if (Collates()) {
    return BuildCollated(job);
  }
  ASSIGN_OR_RETURN(BatchLayout planned,
                   PlannedLayout(job.stream->fields, static_cast<uint32_t>(job.indices.size()),
                                 limits_.max_batch_bytes));
  ASSIGN_OR_RETURN(uint8_t* const payload, AllocatePayload(job, std::move(planned)));
  if (python_ != nullptr) {
    return absl::OkStatus();  // every row of every field is written (or zeroed) by its sample
  }
  const BatchLayout& layout = job.layout;
  job.destination.images = payload + layout.fields[0].offset;
  if (assembler.mask_ids() != MaskIds::kNone) {
    job.destination.masks = payload + layout.fields[1].offset;
  }
  if (assembler.pipeline().multi_view()) {
    for (size_t g = 1; g < assembler.pipeline().view_groups().size(); ++g) {
      job.destination.more_views.push_back(payload + layout.fields[static_cast<int>(g)].offset);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint8_t*> BatchService::AllocatePayload(BatchJob& job, BatchLayout layout) {
  // At least a little: a collated batch that could not be made has no bytes.
  ASSIGN_OR_RETURN(PooledBuffer buffer,
                   buffers_->Get(std::max<uint64_t>(layout.payload_bytes, kFieldAlignment)));
  // The reservation lasts as long as the pixels: until the last send is done.
  struct BatchMemory {
    PooledBuffer buffer;
    MemoryBudget::Grant reserved;
  };
  auto memory =
      std::make_shared<BatchMemory>(BatchMemory{std::move(buffer), std::move(job.memory)});
  uint8_t* payload = memory->buffer.data();
  // The gaps that align fields would carry a pooled buffer's earlier bytes
  // (another client's pixels): zeros instead.
  uint64_t end = 0;
  for (const FieldSlice& field : layout.fields) {
    std::memset(payload + end, 0, field.offset - end);
    end = field.offset + field.bytes;
  }
  job.pixels = OutgoingPixels{memory, payload, layout.payload_bytes};
  job.payload = payload;
  job.layout = std::move(layout);
  return payload;
}

absl::Status BatchService::BuildCollated(BatchJob& job) {
  if (job.stream->abandoned->load()) {
    return absl::CancelledError("the stream ended first");
  }
  const absl::Time start = absl::Now();
  // Called again (for no bytes) when the batch made first cannot be
  // written: the first buffer, and the memory reserved, go then.
  const auto allocate = [&](const BatchLayout& layout) { return AllocatePayload(job, layout); };
  ASSIGN_OR_RETURN(PythonDataset::CollatedBatch batch,
                   python_->BuildBatch(job.stream->params.seed, job.id.epoch(), job.indices,
                                       limits_.max_batch_bytes, allocate));
  absl::MutexLock lock(&job.mu);
  job.slots = std::move(batch.slots);
  job.collated_shapes = std::move(batch.shapes);
  job.seconds.augment += absl::ToDoubleSeconds(absl::Now() - start);
  return absl::OkStatus();
}

void BatchService::BuildSample(BatchJob& job, int slot) {
  const BatchAssembler& assembler = *job.stream->assembler;
  if (Collates()) {
    return;  // Prepare made the whole batch
  }
  if (python_ != nullptr) {
    if (job.stream->abandoned->load()) {
      return;  // no one wants the batch: its slots stay as they are
    }
    const absl::Time start = absl::Now();
    const SlotResult result =
        python_->BuildSlot(job.stream->params.seed, job.id.epoch(), job.indices,
                           static_cast<size_t>(slot), job.payload, job.layout);
    absl::MutexLock lock(&job.mu);
    job.slots[static_cast<size_t>(slot)] = result;
    job.seconds.augment += absl::ToDoubleSeconds(absl::Now() - start);
    return;
  }
  if (synthetic_) {
    std::vector<SlotResult> slots = assembler.SyntheticSlots(job.indices);
    absl::MutexLock lock(&job.mu);
    job.slots = std::move(slots);
    return;
  }
  StageSeconds seconds;
  const SlotResult result = assembler.AssembleSlot(
      {job.stream->params.seed, job.id.epoch(), job.indices, job.stream->abandoned.get()},
      static_cast<size_t>(slot), job.destination, &seconds);
  absl::MutexLock lock(&job.mu);
  job.slots[static_cast<size_t>(slot)] = result;
  job.seconds.read += seconds.read;
  job.seconds.decode += seconds.decode;
  job.seconds.augment += seconds.augment;
}

absl::StatusOr<BatchLayout> BatchService::LayOutRagged(BatchJob& job, const v1::Batch& header,
                                                       OutgoingPixels& pixels) {
  ASSIGN_OR_RETURN(
      BatchLayout layout,
      LayOutBatch(job.stream->fields, static_cast<uint32_t>(header.indices_size()),
                  header.ragged_lengths(), header.collated_shapes(), limits_.max_batch_bytes));
  uint8_t* payload = job.payload;
  uint64_t dense_end = 0;
  for (const FieldSlice& field : layout.fields) {
    if (!field.ragged) {
      dense_end = std::max(dense_end, field.offset + field.bytes);
    }
  }
  if (layout.payload_bytes > pixels.size) {
    // More elements than planned: a larger buffer, the dense fields copied
    // over; the planned one (and its memory grant) goes when this one does.
    struct Grown {
      std::shared_ptr<const void> planned;
      PooledBuffer buffer;
    };
    ASSIGN_OR_RETURN(PooledBuffer buffer, buffers_->Get(layout.payload_bytes));
    auto grown = std::make_shared<Grown>(Grown{std::move(pixels.owner), std::move(buffer)});
    std::memcpy(grown->buffer.data(), payload, dense_end);
    payload = grown->buffer.data();
    pixels = OutgoingPixels{grown, payload, layout.payload_bytes};
    job.payload = payload;
  }
  // Zeros in the gaps that align the ragged fields.
  uint64_t end = dense_end;
  for (const FieldSlice& field : layout.fields) {
    if (field.ragged) {
      std::memset(payload + end, 0, field.offset - end);
      end = field.offset + field.bytes;
    }
  }
  pixels.size = layout.payload_bytes;
  return layout;
}

absl::Status BatchService::PlaceObjects(BatchJob& job, const RaggedValues& objects,
                                        v1::Batch& header, OutgoingPixels& pixels) {
  for (int field = 0; field < 3; ++field) {  // boxes, box_labels, iscrowd: one count each
    header.add_ragged_lengths()->mutable_lengths()->Assign(objects.lengths.begin(),
                                                           objects.lengths.end());
  }
  ASSIGN_OR_RETURN(const BatchLayout layout, LayOutRagged(job, header, pixels));
  WriteField(objects.boxes, layout.fields[1], job.payload);
  WriteField(objects.labels, layout.fields[2], job.payload);
  WriteField(objects.crowd, layout.fields[3], job.payload);
  return absl::OkStatus();
}

absl::Status BatchService::PlacePythonRagged(BatchJob& job, const std::vector<SlotResult>& slots,
                                             v1::Batch& header, OutgoingPixels& pixels) {
  size_t ragged_fields = 0;
  for (const v1::FieldSpec& field : job.stream->fields) {
    ragged_fields += field.ragged() ? 1 : 0;
  }
  for (const SlotResult& slot : slots) {
    if (slot.ragged_lengths.size() != ragged_fields) {  // PythonDataset::BuildSlot sets them all
      return absl::InternalError(absl::StrCat("a slot with ", slot.ragged_lengths.size(),
                                              " ragged lengths of ", ragged_fields));
    }
  }
  for (size_t f = 0; f < ragged_fields; ++f) {
    v1::RaggedLengths* lengths = header.add_ragged_lengths();
    for (const SlotResult& slot : slots) {
      lengths->add_lengths(slot.ragged_lengths[f]);
    }
  }
  ASSIGN_OR_RETURN(const BatchLayout layout, LayOutRagged(job, header, pixels));
  // Field f's elements: every sample's in turn. A sample's bytes hold its
  // fields one after another, so each sample's read position moves on.
  std::vector<uint64_t> read(slots.size(), 0);
  size_t f = 0;
  for (const FieldSlice& field : layout.fields) {
    if (!field.ragged) {
      continue;
    }
    const uint64_t element_bytes = field.row_bytes();
    uint64_t write = field.offset;
    for (size_t i = 0; i < slots.size(); ++i) {
      const uint64_t bytes = slots[i].ragged_lengths[f] * element_bytes;
      std::memcpy(job.payload + write, slots[i].ragged_bytes.data() + read[i], bytes);
      write += bytes;
      read[i] += bytes;
    }
    ++f;
  }
  return absl::OkStatus();
}

absl::StatusOr<BuiltBatch> BatchService::Finish(BatchJob& job) {
  if (job.stream->abandoned->load()) {
    // Some samples may have stopped half-way: not a batch, and not counted.
    return absl::CancelledError("the stream ended first");
  }
  const absl::Time finished = absl::Now();
  const BatchAssembler& assembler = *job.stream->assembler;
  BuiltBatch built;
  v1::Batch* batch = &built.header;
  *batch->mutable_id() = job.id;
  if (python_ == nullptr) {
    batch->set_height(assembler.pipeline().output_height());
    batch->set_width(assembler.pipeline().output_width());
    batch->set_channels(3);
  } else if (python_->labelled_images()) {  // other Python datasets' fields say their shapes
    batch->set_height(python_->fields()[0].shape(0));
    batch->set_width(python_->fields()[0].shape(1));
    batch->set_channels(3);
  }
  batch->set_queue_seconds(absl::ToDoubleSeconds(job.started - job.requested));
  batch->set_build_seconds(absl::ToDoubleSeconds(finished - job.started));
  built.pixels = std::move(job.pixels);
  StageSeconds seconds;
  uint32_t failed = 0;
  uint32_t replaced = 0;
  uint32_t warned = 0;
  RaggedValues objects;
  {
    absl::MutexLock lock(&job.mu);
    for (const SlotResult& slot : job.slots) {
      batch->add_labels(slot.label);
      batch->add_indices(slot.index);
      batch->add_status(ToProto(slot.outcome));
      if (slot.outcome != SampleOutcome::kOk) {
        ++failed;
      }
      if (slot.outcome == SampleOutcome::kReplaced) {
        ++replaced;
      }
      if (slot.decoded_with_warning) {
        ++warned;
      }
      if (assembler.has_boxes()) {
        objects.Add(slot);
      }
    }
    if (failed > 0) {
      for (const SlotResult& slot : job.slots) {
        batch->add_sources(slot.source);
        if (slot.outcome != SampleOutcome::kOk) {
          batch->add_failures(slot.failure.substr(0, kMaxFailureBytes));
        }
      }
    }
    seconds = job.seconds;
    *batch->mutable_collated_shapes() = job.collated_shapes;
  }
  if (assembler.has_boxes()) {
    RETURN_IF_ERROR(PlaceObjects(job, objects, *batch, built.pixels));
  }
  if (python_ != nullptr && python_->has_ragged_fields()) {
    absl::MutexLock lock(&job.mu);
    RETURN_IF_ERROR(PlacePythonRagged(job, job.slots, *batch, built.pixels));
  }
  batch->set_failed(failed);
  batch->set_decoded_with_warnings(warned);
  batches_built_.fetch_add(1, std::memory_order_relaxed);
  const uint64_t samples_so_far =
      samples_built_.fetch_add(static_cast<uint64_t>(batch->labels_size()),
                               std::memory_order_relaxed) +
      static_cast<uint64_t>(batch->labels_size());
  recent_samples_.Note(samples_so_far, absl::Now());
  samples_failed_.fetch_add(failed, std::memory_order_relaxed);
  samples_replaced_.fetch_add(replaced, std::memory_order_relaxed);
  samples_warned_.fetch_add(warned, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  read_seconds_ += seconds.read;
  decode_seconds_ += seconds.decode;
  augment_seconds_ += seconds.augment;
  return built;
}

std::shared_ptr<const std::vector<uint8_t>> BatchService::SyntheticPixels(
    const BatchAssembler& assembler, absl::Span<const int64_t> indices) {
  const size_t bytes = indices.size() * assembler.image_bytes();
  absl::MutexLock lock(&mu_);
  // Bounded: a client cycling through batch sizes must not grow it forever
  // (batches being sent keep their own reference).
  if (synthetic_batches_.count(bytes) == 0 && synthetic_batches_.size() >= 4) {
    synthetic_batches_.erase(synthetic_batches_.begin());
  }
  std::shared_ptr<const std::vector<uint8_t>>& pixels = synthetic_batches_[bytes];
  if (pixels == nullptr) {
    auto built = std::make_shared<std::vector<uint8_t>>(bytes);
    StageSeconds unused;
    assembler.Assemble({0, 0, indices}, {built->data()}, &unused);
    pixels = std::move(built);
  }
  return pixels;
}

v1::ServerStats BatchService::Stats() {
  v1::ServerStats stats;
  stats.set_dataset(source_);
  stats.set_num_samples(num_samples_);
  if (python_ == nullptr) {  // a Python dataset's samples are its own code's
    stats.set_default_pipeline(default_pipeline_.CanonicalSpec());
  }
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
  stats.set_pipelines_refused_costly(pipelines_refused_costly_.load());
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
