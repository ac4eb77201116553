#include "src/data/python/python_dataset.h"

#include <signal.h>

#include <cstring>
#include <set>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/common/fingerprint.h"
#include "src/common/log.h"
#include "src/common/status_macros.h"
#include "src/wire/sample_structure.h"

namespace heterodl {
namespace {

// What two workers of one dataset must agree on, and what a loader compares
// between servers.
uint64_t FingerprintOf(const std::string& spec, const v1::PythonWorkerHello& hello) {
  return Fingerprint()
      .Add("python-dataset")
      .Add(spec)
      .Add(hello.num_samples())
      .Add(hello.structure().SerializeAsString())
      .Add(absl::StrJoin(hello.class_names(), "\n"))
      .Add([&] {
        std::string fields;
        for (const v1::FieldSpec& field : hello.fields()) {
          fields += field.SerializeAsString();
        }
        return fields;
      }())
      .value();
}

// Each field a FIELD node exactly once, and nothing deeper than Python
// would nest.
absl::Status CheckStructure(const v1::SampleNode& node, int fields, std::vector<bool>& seen,
                            int depth) {
  if (depth > 64) {
    return absl::InvalidArgumentError("the sample is nested more than 64 deep");
  }
  switch (node.kind()) {
    case v1::SampleNode::FIELD:
      if (static_cast<int>(node.field()) >= fields || seen[node.field()]) {
        return absl::InvalidArgumentError(
            absl::StrCat("the sample structure names field ", node.field(), " wrongly"));
      }
      seen[node.field()] = true;
      return absl::OkStatus();
    case v1::SampleNode::DICT:
    case v1::SampleNode::NAMEDTUPLE:
      if (node.keys_size() != node.items_size()) {
        return absl::InvalidArgumentError("the sample structure's keys and items disagree");
      }
      break;
    default:
      break;
  }
  for (const v1::SampleNode& item : node.items()) {
    RETURN_IF_ERROR(CheckStructure(item, fields, seen, depth + 1));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<PythonDataset>> PythonDataset::Start(
    const PythonDatasetOptions& options, std::shared_ptr<SharedRegions> regions) {
  PythonDatasetOptions resolved = options;
  if (resolved.workers <= 0) {
    resolved.workers = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }
  // Workers write into batches where the loader and the server read them:
  // heap memory (memfds refused here) would not reach them.
  HostAllocator allocator = regions->allocator();
  void* probe = allocator.allocate(4096);
  const bool shared =
      probe != nullptr && regions->Find(static_cast<const uint8_t*>(probe), 4096).has_value();
  if (probe != nullptr) {
    allocator.release(probe);
  }
  if (!shared) {
    return absl::FailedPreconditionError(
        "--python-dataset needs shared memory (memfd_create) for its workers to write batches "
        "into, and this host refused it (see the warning above)");
  }
  std::unique_ptr<PythonDataset> dataset(new PythonDataset(resolved, std::move(regions)));
  const int count = resolved.workers;
  // Spawned here, on the thread that starts the server (it lives as long as
  // the server); they load the dataset at once.
  std::vector<std::unique_ptr<PythonWorker>> started;
  started.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<PythonWorker> worker, PythonWorker::Spawn(resolved.worker));
    started.push_back(std::move(worker));
  }
  std::vector<v1::PythonWorkerHello> hellos(count);
  std::vector<absl::Status> loaded(count);
  {
    std::vector<std::thread> waiting;
    waiting.reserve(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
      waiting.emplace_back(
          [&, i] { loaded[i] = started[i]->AwaitHello(resolved.worker, &hellos[i]); });
    }
    for (std::thread& thread : waiting) {
      thread.join();
    }
  }
  for (const absl::Status& status : loaded) {
    RETURN_IF_ERROR(status);
  }
  const v1::PythonWorkerHello& first = hellos[0];
  dataset->fingerprint_ = FingerprintOf(resolved.worker.dataset, first);
  for (int i = 1; i < count; ++i) {
    if (FingerprintOf(resolved.worker.dataset, hellos[i]) != dataset->fingerprint_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--python-dataset ", resolved.worker.dataset,
          ": two worker processes made different datasets (length or first sample's fields); "
          "the dataset must not depend on the process it runs in"));
    }
  }
  if (const absl::Status fields = CheckFieldSpecs(first.fields()); !fields.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("--python-dataset ", resolved.worker.dataset,
                                                      ": its samples: ", fields.message()));
  }
  std::vector<bool> seen(static_cast<size_t>(first.fields_size()), false);
  RETURN_IF_ERROR(CheckStructure(first.structure(), first.fields_size(), seen, 0));
  dataset->num_samples_ = first.num_samples();
  dataset->fields_ = first.fields();
  dataset->structure_ = first.structure();
  dataset->class_names_ = first.class_names();
  dataset->labelled_images_ = IsLabelledImages(dataset->structure_, dataset->fields_);
  dataset->collates_ = dataset->fields_[0].collated();
  for (const v1::FieldSpec& field : dataset->fields_) {
    if (field.collated() != dataset->collates_) {
      return absl::FailedPreconditionError(
          absl::StrCat("--python-dataset ", resolved.worker.dataset,
                       ": its workers described some fields as collated and some not"));
    }
  }
  for (const v1::FieldSpec& field : dataset->fields_) {
    if (field.ragged()) {
      uint64_t bytes = DTypeBytes(field.dtype());
      for (const uint32_t dimension : field.shape()) {
        bytes *= dimension;
      }
      dataset->ragged_element_bytes_.push_back(bytes);
    }
  }
  absl::MutexLock lock(&dataset->mu_);
  for (auto& worker : started) {
    dataset->idle_.push_back(std::move(worker));
  }
  return dataset;
}

PythonDataset::~PythonDataset() {
  Stop();
  absl::MutexLock lock(&mu_);
  idle_.clear();  // each closes its socket, then is killed and reaped
}

void PythonDataset::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  for (const pid_t pid : busy_) {
    // Still our unreaped child (CheckIn and the loss path take it out of
    // busy_ first), so the pid is its own.
    ::kill(pid, SIGKILL);
  }
}

bool PythonDataset::IdleOrStopping() const { return !idle_.empty() || stopping_; }

absl::StatusOr<std::unique_ptr<PythonWorker>> PythonDataset::CheckOut() {
  std::unique_ptr<PythonWorker> worker;
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &PythonDataset::IdleOrStopping));
    if (stopping_) {
      return absl::CancelledError("the server is stopping");
    }
    worker = std::move(idle_.back());
    idle_.pop_back();
    if (worker != nullptr) {
      busy_.insert(worker->pid());
      return worker;
    }
  }
  v1::PythonWorkerHello hello;
  absl::StatusOr<std::unique_ptr<PythonWorker>> started =
      PythonWorker::Start(options_.worker, &hello);
  if (started.ok() && FingerprintOf(options_.worker.dataset, hello) != fingerprint_) {
    started = absl::FailedPreconditionError(
        "a restarted Python worker made a different dataset (length or first sample's fields)");
  }
  if (!started.ok()) {
    CheckIn(nullptr);  // tried again next time
    return absl::UnavailableError(
        absl::StrCat("cannot restart a Python worker: ", started.status().message()));
  }
  LogInfo("Python worker %d started in place of one lost", (*started)->pid());
  absl::MutexLock lock(&mu_);
  busy_.insert((*started)->pid());
  if (stopping_) {
    ::kill((*started)->pid(), SIGKILL);  // Stop() came while it started
  }
  return std::move(*started);
}

void PythonDataset::CheckIn(std::unique_ptr<PythonWorker> worker) {
  absl::MutexLock lock(&mu_);
  if (worker != nullptr) {
    busy_.erase(worker->pid());
  }
  idle_.push_back(std::move(worker));
}

void PythonDataset::Lose(std::unique_ptr<PythonWorker> worker) {
  {
    absl::MutexLock lock(&mu_);
    busy_.erase(worker->pid());
  }
  worker.reset();  // killed and reaped, if it was hung
  workers_replaced_.fetch_add(1);
  CheckIn(nullptr);  // started again when next checked out
}

bool PythonDataset::stopping() {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

void PythonDataset::NoteError(const std::string& error) {
  int64_t count = 0;
  {
    absl::MutexLock lock(&mu_);
    count = ++error_counts_[error];
  }
  if (count == 1) {
    LogWarning("Python dataset %s: a sample failed and is replaced: %s", source(), error);
    return;
  }
  for (int64_t power = 10; power <= count; power *= 10) {
    if (count == power) {
      LogWarning("Python dataset %s: %d samples failed so far with: %s", source(), count, error);
    }
  }
}

absl::Status PythonDataset::CheckRagged(const WorkerAnswer& answer) const {
  if (answer.ragged_lengths.size() != ragged_element_bytes_.size()) {
    return absl::InternalError(absl::StrCat("the lengths of ", answer.ragged_lengths.size(),
                                            " ragged fields, where the dataset has ",
                                            ragged_element_bytes_.size()));
  }
  uint64_t bytes = 0;
  for (size_t i = 0; i < answer.ragged_lengths.size(); ++i) {
    if (answer.ragged_lengths[i] > kMaxRaggedLength) {
      return absl::InternalError(
          absl::StrCat(answer.ragged_lengths[i], " elements in a ragged field"));
    }
    bytes += answer.ragged_lengths[i] * ragged_element_bytes_[i];
  }
  if (bytes != answer.ragged_bytes.size()) {
    return absl::InternalError(absl::StrCat(answer.ragged_bytes.size(),
                                            " bytes of ragged fields whose lengths make ", bytes));
  }
  return absl::OkStatus();
}

absl::Status PythonDataset::MakeSample(uint64_t seed, uint32_t epoch, int64_t index, size_t slot,
                                       uint8_t* payload, const BatchLayout& layout,
                                       SlotResult& result) {
  const std::optional<SharedSpan> span = regions_->Find(payload, layout.payload_bytes);
  if (!span) {
    return absl::InternalError("the batch is not in shared memory");
  }
  v1::PythonSampleTask task;
  task.set_seed(seed);
  task.set_epoch(epoch);
  task.set_index(static_cast<uint64_t>(index));
  for (const FieldSlice& field : layout.fields) {
    if (!field.ragged) {
      task.add_offsets(span->offset + field.offset + slot * field.row_bytes());
    }
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    absl::StatusOr<std::unique_ptr<PythonWorker>> worker = CheckOut();
    if (absl::IsCancelled(worker.status())) {
      return worker.status();
    }
    if (!worker.ok()) {
      NoteError(std::string(worker.status().message()));
      return worker.status();
    }
    absl::StatusOr<WorkerAnswer> ran =
        (*worker)->Run(task, *span, *regions_, options_.sample_timeout);
    if (ran.ok() && ran->error.empty()) {
      if (absl::Status checked = CheckRagged(*ran); !checked.ok()) {
        ran = std::move(checked);  // a worker that miscounts is lost as one that dies
      }
    }
    if (ran.ok()) {
      CheckIn(std::move(*worker));
      if (ran->error.empty()) {
        result.ragged_lengths = std::move(ran->ragged_lengths);
        result.ragged_bytes = std::move(ran->ragged_bytes);
        return absl::OkStatus();
      }
      NoteError(ran->error);
      return absl::InvalidArgumentError(ran->error);
    }
    const pid_t pid = (*worker)->pid();
    Lose(std::move(*worker));
    if (stopping()) {
      return absl::CancelledError("the server is stopping");
    }
    LogWarning("Python worker %d was lost making sample %d (%s); %s", pid, index,
               ran.status().message(),
               attempt == 0 ? "starting another, which tries the sample again"
                            : "starting another; the sample counts as failed");
  }
  const std::string lost = absl::StrCat(
      "two Python workers in turn were lost making one sample (a crash, or a hang past "
      "--python-sample-timeout ",
      absl::FormatDuration(options_.sample_timeout), ")");
  NoteError(lost);
  return absl::UnavailableError(lost);
}

SlotResult PythonDataset::BuildSlot(uint64_t seed, uint32_t epoch,
                                    absl::Span<const int64_t> indices, size_t slot,
                                    uint8_t* payload, const BatchLayout& layout) {
  const int64_t index = indices[slot];
  SlotResult result{index, 0, SampleOutcome::kOk, index};
  // The label as it lies in the batch, for Batch.labels.
  const auto label = [&] {
    int64_t value = 0;
    if (labelled_images_) {
      std::memcpy(&value, payload + layout.fields[1].offset + slot * sizeof(value), sizeof(value));
    }
    return value;
  };
  const absl::Status made = MakeSample(seed, epoch, index, slot, payload, layout, result);
  if (made.ok()) {
    result.label = label();
    return result;
  }
  result.failure = absl::StrCat("sample ", index, ": ", made.ToString());
  for (const int64_t candidate : ReplacementCandidates(seed, epoch, index, num_samples_)) {
    if (MakeSample(seed, epoch, candidate, slot, payload, layout, result).ok()) {
      result.outcome = SampleOutcome::kReplaced;
      result.label = label();
      result.source = candidate;
      return result;
    }
  }
  result.outcome = SampleOutcome::kZeroFilled;
  result.label = labelled_images_ ? kUnfilledLabel : 0;
  result.source = -1;
  result.ragged_lengths.assign(ragged_element_bytes_.size(), 0);
  for (const FieldSlice& field : layout.fields) {
    if (!field.ragged) {
      std::memset(payload + field.offset + slot * field.row_bytes(), 0, field.row_bytes());
    }
  }
  return result;
}

absl::StatusOr<PythonDataset::CollatedBatch> PythonDataset::TryBatch(
    const v1::PythonSampleTask& task, absl::Span<const int64_t> indices, uint64_t max_bytes,
    const BatchAllocator& allocate) {
  ASSIGN_OR_RETURN(std::unique_ptr<PythonWorker> worker, CheckOut());
  const absl::Duration timeout =
      options_.sample_timeout * static_cast<int64_t>(std::max<size_t>(1, indices.size()));
  absl::StatusOr<v1::PythonBatchMade> made = worker->MakeBatch(task, *regions_, timeout);
  if (made.ok() && made->slots_size() != static_cast<int>(indices.size())) {
    made = absl::InternalError(absl::StrCat("the worker answered for ", made->slots_size(),
                                            " samples of ", indices.size()));
  }
  if (made.ok() && made->error().empty() && made->shapes_size() != fields_.size()) {
    made = absl::InternalError(absl::StrCat("the worker answered with ", made->shapes_size(),
                                            " shapes for ", fields_.size(), " fields"));
  }
  const auto lose = [&](const absl::Status& why) {
    const pid_t pid = worker->pid();
    Lose(std::move(worker));
    if (stopping()) {
      return absl::CancelledError("the server is stopping");
    }
    return absl::UnavailableError(
        absl::StrCat("Python worker ", pid, " was lost making a batch: ", why.message()));
  };
  if (!made.ok()) {
    return lose(made.status());
  }
  CollatedBatch batch;
  for (int i = 0; i < made->slots_size(); ++i) {
    const v1::PythonSlotMade& slot = made->slots(i);
    for (const std::string& error : slot.errors()) {
      NoteError(error);
    }
    const int64_t planned = indices[static_cast<size_t>(i)];
    SlotResult result{planned, 0, SampleOutcome::kZeroFilled, -1};
    if (slot.made()) {
      result.source = static_cast<int64_t>(slot.index());
      result.outcome = result.source == planned ? SampleOutcome::kOk : SampleOutcome::kReplaced;
    }
    if (result.outcome != SampleOutcome::kOk) {
      result.failure = absl::StrCat("sample ", planned, ": ",
                                    slot.errors().empty() ? "not made" : slot.errors(0));
    }
    batch.slots.push_back(std::move(result));
  }
  if (!made->error().empty()) {
    CheckIn(std::move(worker));
    NoteError(made->error());
    return absl::InvalidArgumentError(made->error());
  }
  absl::StatusOr<BatchLayout> layout =
      LayOutBatch(fields_, static_cast<uint32_t>(indices.size()), {}, made->shapes(), max_bytes);
  if (!layout.ok()) {
    CheckIn(std::move(worker));  // it drops the batch with the next task
    const std::string error =
        absl::StrCat("collate_fn made a batch the server cannot send: ", layout.status().message());
    NoteError(error);
    return absl::InvalidArgumentError(error);
  }
  absl::StatusOr<uint8_t*> payload = allocate(*layout);
  if (!payload.ok()) {
    CheckIn(std::move(worker));
    return payload.status();
  }
  if (layout->payload_bytes > 0) {
    const std::optional<SharedSpan> span = regions_->Find(*payload, layout->payload_bytes);
    if (!span) {
      CheckIn(std::move(worker));
      return absl::InternalError("the batch is not in shared memory");
    }
    v1::PythonSampleTask write;
    for (const FieldSlice& field : layout->fields) {
      write.add_offsets(span->offset + field.offset);
    }
    absl::StatusOr<std::string> written =
        worker->WriteBatch(std::move(write), *span, *regions_, options_.sample_timeout);
    if (!written.ok()) {
      return lose(written.status());
    }
    if (!written->empty()) {
      CheckIn(std::move(worker));
      NoteError(*written);
      return absl::InvalidArgumentError(*written);
    }
  }
  CheckIn(std::move(worker));
  batch.shapes = std::move(*made->mutable_shapes());
  return batch;
}

absl::StatusOr<PythonDataset::CollatedBatch> PythonDataset::BuildBatch(
    uint64_t seed, uint32_t epoch, absl::Span<const int64_t> indices, uint64_t max_bytes,
    const BatchAllocator& allocate) {
  v1::PythonSampleTask task;
  task.set_seed(seed);
  task.set_epoch(epoch);
  for (const int64_t index : indices) {
    v1::PythonBatchSlot* slot = task.add_batch();
    slot->set_index(static_cast<uint64_t>(index));
    for (const int64_t candidate : ReplacementCandidates(seed, epoch, index, num_samples_)) {
      slot->add_candidates(static_cast<uint64_t>(candidate));
    }
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    absl::StatusOr<CollatedBatch> batch = TryBatch(task, indices, max_bytes, allocate);
    if (batch.ok() || absl::IsCancelled(batch.status())) {
      return batch;
    }
    if (absl::IsInvalidArgument(batch.status())) {
      break;  // the user's code, or the batch's size: logged, and no better a second time
    }
    if (!absl::IsUnavailable(batch.status())) {
      return batch.status();  // `allocate`'s
    }
    LogWarning("%s; %s", batch.status().message(),
               attempt == 0 ? "another worker makes the batch again"
                            : "the batch's samples count as failed");
    if (attempt == 1) {
      NoteError(
          "two Python workers in turn were lost making one batch (a crash, or a hang past "
          "--python-sample-timeout for each sample)");
    }
  }
  // Not collated: no sample of it is delivered, and each counts as failed.
  CollatedBatch empty;
  for (const int64_t index : indices) {
    empty.slots.push_back({index, 0, SampleOutcome::kZeroFilled, -1,
                           absl::StrCat("sample ", index, ": its batch could not be collated")});
  }
  for (const v1::FieldSpec& field : fields_) {
    empty.shapes.Add()->mutable_dims()->Resize(field.shape_size(), 0);
  }
  ASSIGN_OR_RETURN(
      const BatchLayout layout,
      LayOutBatch(fields_, static_cast<uint32_t>(indices.size()), {}, empty.shapes, max_bytes));
  RETURN_IF_ERROR(allocate(layout).status());
  return empty;
}

}  // namespace heterodl
