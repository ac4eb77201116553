#include "src/train/trainer.h"

#include <ATen/autocast_mode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "src/client/data_group_watch.h"
#include "src/client/loader_plan.h"
#include "src/client/remote_loader.h"
#include "src/common/fingerprint.h"
#include "src/common/log.h"
#include "src/common/status_macros.h"
#include "src/metrics/feed_metrics.h"
#include "src/metrics/metrics_endpoint.h"
#include "src/plan/epoch_plan.h"
#include "src/train/checkpoint.h"
#include "src/train/communicator.h"
#include "src/train/device_feed.h"
#include "src/train/gradient_reducer.h"
#include "src/train/lr_schedule.h"
#include "src/train/metrics_writer.h"
#include "src/train/models.h"
#include "src/train/optimizers.h"
#include "src/train/pinned_memory.h"

namespace heterodl {
namespace {

// Steps between the host's waits for the device (the stop decision and the
// losses): a CUDA rank queues up to this many steps ahead, and a signal
// stops training within as many steps (well under a second on a GPU).
constexpr int64_t kSyncEvery = 8;

class SampleLog {
 public:
  absl::Status Open(const std::string& dir, uint32_t rank, bool append) {
    if (dir.empty()) {
      return absl::OkStatus();
    }
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    const std::string path = absl::StrCat(dir, "/rank", rank, ".samples");
    file_.open(path, append ? std::ios::app : std::ios::trunc);
    if (!file_) {
      return absl::UnavailableError(absl::StrCat("cannot create '", path, "'"));
    }
    return absl::OkStatus();
  }
  // `first_batch`: the number of the loader's batch 0 in its epoch (a rest's).
  void Record(const Batch& batch, int64_t first_batch) {
    if (!file_.is_open()) {
      return;
    }
    for (int64_t index : batch.indices) {
      file_ << batch.epoch << ' ' << first_batch + batch.index << ' ' << index << '\n';
    }
    file_.flush();
  }

 private:
  std::ofstream file_;
};

bool StopRequested(const TrainerOptions& options) {
  return options.stop_requested != nullptr && options.stop_requested->load();
}

void SetLearningRate(torch::optim::Optimizer& optimizer, double lr) {
  for (torch::optim::OptimizerParamGroup& group : optimizer.param_groups()) {
    group.options().set_lr(lr);
  }
}

// Whether the forward pass runs under bf16 autocast.
bool UseBf16(Precision precision, const torch::Device& device) {
  switch (precision) {
    case Precision::kAuto:
      return device.is_cuda();
    case Precision::kBf16:
      return true;
    case Precision::kFp32:
      return false;
  }
  return false;
}

// Autocast for the forward pass, on the device's type; off again on exit.
class AutocastScope {
 public:
  AutocastScope(bool enabled, const torch::Device& device)
      : enabled_(enabled), type_(device.type()) {
    if (!enabled_) {
      return;
    }
    at::autocast::set_autocast_dtype(type_, at::kBFloat16);
    at::autocast::set_autocast_enabled(type_, true);
  }
  ~AutocastScope() {
    if (!enabled_) {
      return;
    }
    at::autocast::set_autocast_enabled(type_, false);
    at::autocast::clear_cache();
  }

 private:
  const bool enabled_;
  const c10::DeviceType type_;
};

// Every rank starts from rank 0's weights and batch norm statistics.
absl::Status SynchronizeModel(Model& model, Communicator& communicator) {
  torch::NoGradGuard no_grad;
  for (torch::Tensor& parameter : model.Parameters()) {
    RETURN_IF_ERROR(communicator.Broadcast(parameter));
  }
  for (torch::Tensor& buffer : model.Buffers()) {
    RETURN_IF_ERROR(communicator.Broadcast(buffer));
  }
  return absl::OkStatus();
}

// Rank 0 tells the others where training stands; a rank that resumed from
// another place (a checkpoint directory not shared by every host) is an error.
absl::Status AgreeOnStart(const TrainingState& mine, Communicator& communicator,
                          const torch::Device& device) {
  torch::Tensor state = torch::tensor({mine.step, static_cast<int64_t>(mine.epoch), mine.next_batch,
                                       static_cast<int64_t>(mine.epoch_offset)})
                            .to(device);
  RETURN_IF_ERROR(communicator.Broadcast(state));
  state = state.cpu();
  if (state[0].item<int64_t>() != mine.step || state[1].item<int64_t>() != mine.epoch ||
      state[2].item<int64_t>() != mine.next_batch ||
      state[3].item<int64_t>() != static_cast<int64_t>(mine.epoch_offset)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", communicator.rank(), " would start at step ", mine.step, " but rank 0 at step ",
        state[0].item<int64_t>(), ": every dnn host must see the same --checkpoint-dir"));
  }
  return absl::OkStatus();
}

class ProgressLine {
 public:
  explicit ProgressLine(bool active) : active_(active), terminal_(isatty(STDERR_FILENO) == 1) {}
  ~ProgressLine() {
    if (active_ && terminal_ && printed_) {
      std::fputc('\n', stderr);
    }
  }
  // `when`: the time the line is about, which its log line carries.
  void Show(const std::string& text, absl::Time when) {
    if (!active_) {
      return;
    }
    if (terminal_) {
      std::fprintf(stderr, "\r%s\033[K", text.c_str());
      std::fflush(stderr);
      printed_ = true;
    } else {
      LogLineAt(LogLevel::kInfo, when, text);
    }
  }

 private:
  const bool active_;
  const bool terminal_;
  bool printed_ = false;
};

// The loader of one rank: its share of every epoch, pinned buffers on CUDA.
// With an `epoch_offset`, of the rest of an epoch a run at another world
// size began (PlanParams::epoch_offset).
absl::StatusOr<std::unique_ptr<RemoteLoader>> ConnectLoader(const TrainerOptions& options,
                                                            const torch::Device& device,
                                                            uint64_t epoch_offset = 0) {
  RemoteLoaderOptions loader_options = options.data;
  loader_options.epoch_offset = epoch_offset;
  loader_options.rank = static_cast<uint32_t>(options.rendezvous.rank);
  loader_options.world_size = static_cast<uint32_t>(options.rendezvous.world_size);
  if (device.is_cuda()) {
    loader_options.pixel_allocator = PinnedHostAllocator();
  }
  // A signal while servers are awaited ends the wait; once training runs,
  // a signal stops all ranks at the same step instead (AnyRankStops).
  loader_options.interrupt_connect = [&options] { return StopRequested(options); };
  return RemoteLoader::Connect(loader_options);
}

absl::StatusOr<std::unique_ptr<Communicator>> JoinRanks(const TrainerOptions& options,
                                                        const torch::Device& device) {
  RendezvousOptions rendezvous = options.rendezvous;
  rendezvous.use_nccl = device.is_cuda();
  return CreateCommunicator(rendezvous);
}

// One rank's run: set up, train epoch after epoch, wind down. Every rank
// runs the same collectives in the same order.
class RankTrainer {
 public:
  explicit RankTrainer(const TrainerOptions& options) : options_(options) {}

  absl::Status SetUp();
  absl::Status Train();
  // The last checkpoint and the final model, the run's summary, the process
  // group ended in order.
  absl::Status WindDown();

 private:
  // A checkpoint was asked for (--resume): where it says training stands.
  // One written by another world size or batch size leaves the rest of its
  // epoch to rest_.
  absl::Status Resume();
  // INVALID_ARGUMENT, naming what differs, when `loaded` is a position in
  // another dataset's epochs or another shuffle (seed, drop_last, shuffle).
  absl::Status CheckSamePermutation(const TrainingState& loaded) const;
  // The rest of `loaded`'s epoch, as this run's ranks split it.
  absl::Status ResumeResized(const TrainingState& loaded);
  // A position in this run's plans: `next_batch` of `epoch` (numbered on from
  // the rest's first batch in the rest's epoch).
  TrainingState At(int64_t step, uint32_t epoch, int64_t next_batch) const;
  // --metrics-port: the endpoint, serving from its first scrape.
  absl::Status ServeMetrics();
  // Steps per epoch, epochs and steps of the run, and where the loader
  // stops fetching. FAILED_PRECONDITION when an epoch has no batch.
  absl::Status PlanSteps();
  absl::Status TrainEpoch(uint32_t epoch, BatchFeeder& feeder, ProgressLine& progress);
  // Forward, backward (gradient buckets all-reducing meanwhile), update; or
  // the modelled accelerator's time. Returns the loss, still on the device.
  absl::StatusOr<torch::Tensor> Step(const DeviceBatch& batch, double lr);
  // Whether any rank was asked to stop: all stop at the same step.
  absl::StatusOr<bool> AnyRankStops();
  // A trained step, its loss still on the device: kept until FlushSteps(),
  // with the received batch, whose pinned pixels a queued copy may still read.
  // `step_start` to `finished` is the step's time; its progress line is
  // stamped `finished`, the same clock read.
  void Record(uint32_t epoch, Batch host, double lr, torch::Tensor loss, absl::Time step_start,
              absl::Time finished, double wait_ms);
  // Reads the kept steps' losses back in one copy, then writes their metrics
  // rows and progress lines.
  void FlushSteps(ProgressLine& progress);
  absl::Status Save(const TrainingState& at);
  absl::Status WriteSummary();

  const TrainerOptions& options_;
  torch::Device device_{torch::kCPU};
  bool bf16_ = false;
  // The model's layout, which its input takes too (--memory-format).
  torch::MemoryFormat input_format_ = torch::MemoryFormat::Contiguous;
  std::unique_ptr<RemoteLoader> loader_;
  // The epoch a checkpoint of another world size or batch size left
  // unfinished: its rest, on its own loader, its batches numbered on from
  // `first` (the batches the checkpoint had counted in it).
  struct EpochRest {
    uint32_t epoch = 0;
    uint64_t offset = 0;  // entries of the epoch's permutation read before
    int64_t first = 0;
    std::unique_ptr<RemoteLoader> loader;
  };
  std::optional<EpochRest> rest_;
  std::unique_ptr<Communicator> communicator_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  // Refers to the model's parameters and the communicator: declared after
  // them, destroyed before them.
  std::unique_ptr<GradientReducer> reducer_;
  std::unique_ptr<MetricsWriter> metrics_;
  // Rank 0 with a metrics file or port: the data group's capacity for the
  // scaling signal in its metrics.
  std::unique_ptr<DataGroupWatch> data_group_;
  // Rank 0 with a metrics port: its steps as Prometheus scrapes them. The
  // endpoint reads both above: declared after them, destroyed before them.
  std::unique_ptr<FeedMetrics> feed_;
  std::unique_ptr<MetricsEndpoint> metrics_endpoint_;
  SampleLog sample_log_;
  std::optional<LrSchedule> schedule_;
  int64_t steps_per_epoch_ = 0;
  int epochs_ = 0;
  int64_t total_steps_ = 0;
  TrainingState start_;     // where this run began
  TrainingState position_;  // after the last trained batch
  int64_t step_ = 0;
  int64_t last_saved_step_ = 0;
  bool stopped_ = false;
  absl::Time run_start_;
  // Steps trained since the last FlushSteps(), their losses on the device.
  struct PendingStep {
    StepRecord record;
    torch::Tensor loss;
    Batch host;
    absl::Time finished;  // when the host was done with the step
  };
  std::vector<PendingStep> pending_;
};

absl::Status RankTrainer::SetUp() {
  torch::manual_seed(static_cast<uint64_t>(options_.data.seed));
  ASSIGN_OR_RETURN(device_, ChooseDevice(options_.device, options_.local_rank));
  bf16_ = UseBf16(options_.precision, device_);
  // CPU ranks share the host's cores with each other (and, locally, with the
  // data servers): one intra-op thread each avoids oversubscription.
  if (device_.is_cpu()) {
    torch::set_num_threads(1);
  }
  // A CUDA rank's current device is its own GPU, so allocations without an
  // explicit device (NCCL's, autocast's) do not land on GPU 0.
  if (device_.is_cuda()) {
    c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->setDevice(device_);
  }
  ASSIGN_OR_RETURN(loader_, ConnectLoader(options_, device_));
  // A user's own dataset of (image, label) pairs trains as a classification
  // dataset: its batches lead with the images and carry the labels.
  if (loader_->dataset().fields != std::vector<std::string>{"images"} &&
      !loader_->dataset().labelled_images) {
    // Trained on its images and labels alone, its targets would be lost.
    return absl::FailedPreconditionError(
        absl::StrCat("heterodl train trains classifiers, and the data servers' batches hold ",
                     absl::StrJoin(loader_->dataset().fields, ", "),
                     " (a segmentation or detection dataset, or a Python dataset whose samples "
                     "are not (image uint8 [H, W, 3], int label)): train it with your own loop "
                     "over heterodl.RemoteDataLoader (examples/pytorch/train_segmentation.py, "
                     "train_detection.py, custom_dataset/)"));
  }
  ASSIGN_OR_RETURN(communicator_, JoinRanks(options_, device_));
  const int num_classes = static_cast<int>(loader_->dataset().class_names.size());
  ASSIGN_OR_RETURN(model_, CreateModel(options_.model, num_classes));
  model_->To(device_);
  if (options_.memory_format == MemoryFormat::kChannelsLast ||
      (options_.memory_format == MemoryFormat::kAuto && device_.is_cuda())) {
    ToChannelsLast(*model_);
    input_format_ = torch::MemoryFormat::ChannelsLast;
  }
  RETURN_IF_ERROR(SynchronizeModel(*model_, *communicator_));
  OptimizerSettings optimizer;
  optimizer.kind = options_.optimizer.kind;
  optimizer.learning_rate = options_.optimizer.learning_rate;
  optimizer.momentum = options_.optimizer.momentum;
  optimizer.weight_decay = options_.optimizer.weight_decay;
  optimizer_ = CreateOptimizer(optimizer, model_->Parameters());
  RETURN_IF_ERROR(Resume());
  reducer_ = std::make_unique<GradientReducer>(model_->Parameters(), *communicator_,
                                               static_cast<size_t>(options_.bucket_bytes));
  ASSIGN_OR_RETURN(metrics_, MetricsWriter::Open(options_.metrics_file, options_.rendezvous.rank,
                                                 start_.step > 0));
  if (options_.rendezvous.rank == 0 &&
      (!options_.metrics_file.empty() || options_.metrics_port >= 0)) {
    data_group_ = std::make_unique<DataGroupWatch>(options_.data.servers, options_.data.auth_token,
                                                   options_.data.tls);
  }
  RETURN_IF_ERROR(ServeMetrics());
  RETURN_IF_ERROR(
      sample_log_.Open(options_.sample_log_dir, options_.rendezvous.rank, start_.step > 0));
  RETURN_IF_ERROR(PlanSteps());
  schedule_.emplace(LrSchedule{options_.optimizer.learning_rate, options_.optimizer.warmup_steps,
                               total_steps_, options_.optimizer.schedule});
  if (options_.rendezvous.rank == 0) {
    LogInfo(
        "training %s on %s (%s%s) over %s: %d samples, %d classes, %d ranks, batch %d, %d "
        "step(s) per epoch, %d step(s), %d gradient bucket(s)",
        options_.model, device_.str(), bf16_ ? "bf16 autocast" : "fp32",
        device_.is_cuda() ? ", pinned host buffers" : "", communicator_->backend(),
        loader_->dataset().num_samples, num_classes, options_.rendezvous.world_size,
        options_.data.batch_size, steps_per_epoch_, total_steps_, reducer_->num_buckets());
  }
  return absl::OkStatus();
}

absl::Status RankTrainer::ServeMetrics() {
  if (options_.metrics_port < 0) {
    return absl::OkStatus();
  }
  feed_ = std::make_unique<FeedMetrics>("train", options_.rendezvous.world_size);
  ASSIGN_OR_RETURN(metrics_endpoint_,
                   MetricsEndpoint::Start("0.0.0.0", options_.metrics_port,
                                          [feed = feed_.get(), watch = data_group_.get()] {
                                            return feed->Render(watch->capacity(),
                                                                HETERODL_VERSION);
                                          }));
  LogInfo("Prometheus metrics at http://0.0.0.0:%d/metrics", metrics_endpoint_->port());
  return absl::OkStatus();
}

absl::Status RankTrainer::Resume() {
  if (options_.resume && !options_.checkpoint_dir.empty()) {
    ASSIGN_OR_RETURN(std::optional<TrainingState> loaded,
                     LoadCheckpoint(options_.checkpoint_dir, *model_, *optimizer_));
    if (loaded) {
      start_ = *loaded;
      if (options_.rendezvous.rank == 0) {
        LogInfo("resuming from %s/checkpoint.pt at step %d (epoch %d, batch %d)",
                options_.checkpoint_dir, start_.step, start_.epoch, start_.next_batch);
      }
      RETURN_IF_ERROR(CheckSamePermutation(*loaded));
      const bool same_plan =
          (loaded->world_size == 0 ||
           (loaded->world_size == static_cast<uint32_t>(options_.rendezvous.world_size) &&
            loaded->batch_size == options_.data.batch_size)) &&
          loaded->epoch_offset == 0;
      if (!same_plan) {
        RETURN_IF_ERROR(ResumeResized(*loaded));
      }
    }
  }
  start_ = At(start_.step, start_.epoch, start_.next_batch);
  RETURN_IF_ERROR(AgreeOnStart(start_, *communicator_, device_));
  position_ = start_;
  step_ = start_.step;
  last_saved_step_ = start_.step;
  return absl::OkStatus();
}

absl::Status RankTrainer::CheckSamePermutation(const TrainingState& loaded) const {
  if (loaded.world_size == 0) {
    return absl::OkStatus();  // written before the plan was saved: taken as it was
  }
  const TrainingState mine = At(0, 0, 0);
  std::vector<std::string> differs;
  if (loaded.dataset_fingerprint != mine.dataset_fingerprint) {
    differs.push_back(absl::StrCat("the dataset (fingerprint ",
                                   FingerprintToHex(loaded.dataset_fingerprint), ", the servers' ",
                                   FingerprintToHex(mine.dataset_fingerprint), ")"));
  }
  if (loaded.seed != mine.seed) {
    differs.push_back(absl::StrCat("--seed ", loaded.seed, " (this run: ", mine.seed, ")"));
  }
  if (loaded.drop_last != mine.drop_last) {
    differs.push_back(absl::StrCat("--drop-last ", loaded.drop_last ? "on" : "off"));
  }
  if (loaded.shuffle != mine.shuffle) {
    differs.push_back(absl::StrCat("shuffle ", loaded.shuffle ? "on" : "off"));
  }
  if (loaded.shuffle_block_shards && loaded.shuffle_block_shards != mine.shuffle_block_shards) {
    differs.push_back(absl::StrCat("--shuffle-block-shards ", *loaded.shuffle_block_shards,
                                   " (this run: ", *mine.shuffle_block_shards, ")"));
  }
  if (differs.empty()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(options_.checkpoint_dir,
                   "/checkpoint.pt is a position in other epochs: ", absl::StrJoin(differs, ", "),
                   ". Resume with what it was written with, or start a new --checkpoint-dir"));
}

absl::Status RankTrainer::ResumeResized(const TrainingState& loaded) {
  // The plan the checkpoint's position is a batch of: this run's, but for
  // the ranks, batch and offset it was written with.
  PlanParams written = PlanParamsOf(options_.data, loader_->dataset().num_samples);
  written.world_size = loaded.world_size;
  written.batch_size = loaded.batch_size;
  written.epoch_offset = loaded.epoch_offset;
  const absl::StatusOr<uint64_t> consumed =
      SamplesConsumed(written, loaded.next_batch - loaded.first_batch);
  if (!consumed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        options_.checkpoint_dir, "/checkpoint.pt: its position is no batch of its own plan (",
        loaded.world_size, " ranks, batch ", loaded.batch_size,
        "): ", consumed.status().message()));
  }
  if (*consumed == 0 || *consumed >= written.num_samples) {
    // Nothing of the epoch read, or all of it: where this run's plan says.
    start_.next_batch = *consumed == 0 ? 0 : loader_->size();
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::unique_ptr<RemoteLoader> loader,
                   ConnectLoader(options_, device_, *consumed));
  RETURN_IF_ERROR(loader->SetEnd(loaded.epoch, loader->size()));
  if (options_.rendezvous.rank == 0) {
    LogInfo(
        "the checkpoint was written by %d rank(s) of batch %d: the %d samples of epoch %d they "
        "had not trained on are split over these %d rank(s), %d step(s) of batch %d",
        loaded.world_size, loaded.batch_size, written.num_samples - *consumed, loaded.epoch,
        options_.rendezvous.world_size, loader->size(), options_.data.batch_size);
  }
  rest_ = EpochRest{loaded.epoch, *consumed, loaded.next_batch, std::move(loader)};
  return absl::OkStatus();
}

TrainingState RankTrainer::At(int64_t step, uint32_t epoch, int64_t next_batch) const {
  TrainingState state;
  state.step = step;
  state.epoch = epoch;
  state.next_batch = next_batch;
  state.world_size = static_cast<uint32_t>(options_.rendezvous.world_size);
  state.batch_size = options_.data.batch_size;
  state.dataset_fingerprint = loader_->dataset().fingerprint;
  state.seed = options_.data.seed;
  state.drop_last = options_.data.drop_last;
  state.shuffle = options_.data.shuffle;
  state.shuffle_block_shards = options_.data.shuffle_block_shards;
  if (rest_ && rest_->epoch == epoch) {
    state.epoch_offset = rest_->offset;
    state.first_batch = rest_->first;
  }
  return state;
}

absl::Status RankTrainer::PlanSteps() {
  steps_per_epoch_ = loader_->size();
  if (steps_per_epoch_ == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("an epoch holds no batch for each of the ", options_.rendezvous.world_size,
                     " ranks: ", loader_->dataset().num_samples, " samples with --batch-size ",
                     options_.data.batch_size, " and drop_last"));
  }
  epochs_ = options_.epochs;
  if (options_.steps > 0) {
    epochs_ = static_cast<int>((options_.steps + steps_per_epoch_ - 1) / steps_per_epoch_);
  }
  total_steps_ = options_.steps > 0 ? options_.steps : steps_per_epoch_ * epochs_;
  // Where the main loader's batches begin, as a count of this plan's
  // batches, and the steps before them: a rest runs its epoch's steps first.
  int64_t main_begin = static_cast<int64_t>(start_.epoch) * steps_per_epoch_ + start_.next_batch;
  int64_t steps_before_main = start_.step;
  if (rest_) {
    main_begin = static_cast<int64_t>(rest_->epoch + 1) * steps_per_epoch_;
    steps_before_main += rest_->loader->size();
    if (options_.steps <= 0) {
      // The resumed epoch has the rest's steps, not this plan's.
      total_steps_ =
          steps_before_main + (epochs_ - static_cast<int64_t>(rest_->epoch) - 1) * steps_per_epoch_;
    }
  }
  // The loader fetches up to the run's last batch and not past it: a short
  // run's last steps, or its last epoch, leave no batch built for nothing.
  int64_t end = static_cast<int64_t>(epochs_) * steps_per_epoch_;
  if (options_.steps > 0) {
    end = std::min(end, main_begin + (options_.steps - steps_before_main));
  }
  end = std::max<int64_t>(end, 1);
  return loader_->SetEnd(static_cast<uint32_t>((end - 1) / steps_per_epoch_),
                         (end - 1) % steps_per_epoch_ + 1);
}

absl::Status RankTrainer::Train() {
  model_->SetTraining(true);
  BatchFeeder feeder(*loader_, device_, /*convert=*/options_.device_step_ms <= 0, input_format_);
  ProgressLine progress(options_.rendezvous.rank == 0);
  run_start_ = absl::Now();
  for (uint32_t epoch = start_.epoch; static_cast<int>(epoch) < epochs_ && !stopped_; ++epoch) {
    if (options_.steps > 0 && step_ >= options_.steps) {
      break;
    }
    if (rest_ && rest_->epoch == epoch) {
      BatchFeeder rest_feeder(*rest_->loader, device_, options_.device_step_ms <= 0, input_format_);
      RETURN_IF_ERROR(TrainEpoch(epoch, rest_feeder, progress));
    } else {
      RETURN_IF_ERROR(TrainEpoch(epoch, feeder, progress));
    }
  }
  FlushSteps(progress);
  return absl::OkStatus();
}

absl::Status RankTrainer::TrainEpoch(uint32_t epoch, BatchFeeder& feeder, ProgressLine& progress) {
  // A rest's loader numbers its batches from 0; the epoch counts them on.
  const int64_t first = rest_ && rest_->epoch == epoch ? rest_->first : 0;
  RETURN_IF_ERROR(feeder.StartEpoch(epoch, epoch == start_.epoch ? start_.next_batch - first : 0));
  absl::Time step_start = absl::Now();
  ASSIGN_OR_RETURN(std::optional<DeviceBatch> current, feeder.Next());
  double wait_ms = feeder.last_wait_ms();
  while (current) {
    const double lr = schedule_->At(step_);
    ASSIGN_OR_RETURN(const torch::Tensor loss, Step(*current, lr));
    position_ = At(step_ + 1, current->host.epoch, first + current->host.index + 1);
    // On CUDA the step is still running: fetch and queue the next batch now.
    const bool last = options_.steps > 0 && step_ + 1 >= options_.steps;
    std::optional<DeviceBatch> next;
    if (!last) {
      ASSIGN_OR_RETURN(next, feeder.Next());
      wait_ms += feeder.last_wait_ms();
    }
    sample_log_.Record(current->host, first);
    const absl::Time now = absl::Now();
    Record(epoch, std::move(current->host), lr, loss.detach(), step_start, now, wait_ms);
    ++step_;
    step_start = now;
    wait_ms = 0;
    current = std::move(next);
    // The host waits for the device only here, every kSyncEvery steps: the
    // stop decision (one all-reduce) and the steps' losses (one copy). Ranks
    // count steps alike, so they all stop after the same step.
    if (step_ % kSyncEvery == 0 || last) {
      ASSIGN_OR_RETURN(const bool stop, AnyRankStops());
      FlushSteps(progress);
      if (stop) {
        stopped_ = true;
        return Save(position_);
      }
    }
    if (options_.checkpoint_every > 0 && step_ % options_.checkpoint_every == 0) {
      RETURN_IF_ERROR(Save(position_));
    }
    if (last) {
      break;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<torch::Tensor> RankTrainer::Step(const DeviceBatch& batch, double lr) {
  SetLearningRate(*optimizer_, lr);
  if (options_.device_step_ms > 0) {
    // A modelled accelerator: busy for the step's time, the CPU idle.
    absl::SleepFor(absl::Milliseconds(options_.device_step_ms));
    return torch::zeros({});
  }
  optimizer_->zero_grad();
  torch::Tensor loss;
  {
    AutocastScope autocast(bf16_, device_);
    loss = torch::nn::functional::cross_entropy(model_->Forward(batch.input), batch.labels);
  }
  loss.backward();  // gradient buckets start all-reducing during this
  RETURN_IF_ERROR(reducer_->FinishStep());
  optimizer_->step();
  return loss;
}

absl::StatusOr<bool> RankTrainer::AnyRankStops() {
  torch::Tensor stop = torch::tensor({StopRequested(options_) ? 1.0f : 0.0f}).to(device_);
  RETURN_IF_ERROR(communicator_->AllReduceSum(stop));
  return stop.cpu().item<float>() > 0;
}

void RankTrainer::Record(uint32_t epoch, Batch host, double lr, torch::Tensor loss,
                         absl::Time step_start, absl::Time finished, double wait_ms) {
  StepRecord record;
  record.step = static_cast<uint64_t>(step_) + 1;
  record.epoch = epoch;
  record.step_ms = absl::ToDoubleMilliseconds(finished - step_start);
  record.data_wait_ms = wait_ms;
  record.batch_size = static_cast<uint32_t>(host.size());
  record.failed_samples = static_cast<uint32_t>(host.failed);
  record.learning_rate = lr;
  record.images_per_sec = record.step_ms > 0 ? record.batch_size * options_.rendezvous.world_size *
                                                   1000.0 / record.step_ms
                                             : 0;
  if (data_group_ != nullptr) {
    if (const std::optional<DataGroupCapacity> capacity = data_group_->capacity()) {
      record.data_capacity_per_host = capacity->per_host;
      record.data_hosts = capacity->hosts;
    }
  }
  pending_.push_back({record, std::move(loss), std::move(host), finished});
}

void RankTrainer::FlushSteps(ProgressLine& progress) {
  if (pending_.empty()) {
    return;
  }
  std::vector<torch::Tensor> losses;
  for (const PendingStep& step : pending_) {
    losses.push_back(step.loss);
  }
  // One stack, one conversion, one copy: the host waits for the steps here.
  const torch::Tensor values = torch::stack(losses).to(torch::kCPU, torch::kFloat64);
  const auto value = values.accessor<double, 1>();
  for (size_t i = 0; i < pending_.size(); ++i) {
    StepRecord& record = pending_[i].record;
    record.loss = value[static_cast<int64_t>(i)];
    metrics_->RecordStep(record);
    if (feed_ != nullptr) {
      feed_->RecordStep({record.step_ms / 1000, record.data_wait_ms / 1000, record.batch_size,
                         record.failed_samples});
    }
    progress.Show(
        absl::StrFormat(
            "epoch %d step %d/%d  loss %.4f  lr %.4g  step %.1f ms  %.0f img/s  data wait %.1f ms "
            "(%.0f%%)",
            record.epoch, record.step, total_steps_, record.loss, record.learning_rate,
            record.step_ms, record.images_per_sec, record.data_wait_ms,
            record.step_ms > 0 ? 100.0 * record.data_wait_ms / record.step_ms : 0),
        pending_[i].finished);
  }
  pending_.clear();
}

absl::Status RankTrainer::Save(const TrainingState& at) {
  last_saved_step_ = at.step;
  if (options_.rendezvous.rank != 0 || options_.checkpoint_dir.empty()) {
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(SaveCheckpoint(options_.checkpoint_dir, *model_, *optimizer_, at));
  LogInfo("checkpoint at step %d written to %s/checkpoint.pt", at.step, options_.checkpoint_dir);
  return absl::OkStatus();
}

absl::Status RankTrainer::WindDown() {
  if (!stopped_ && position_.step != last_saved_step_) {
    RETURN_IF_ERROR(Save(position_));
  }
  if (options_.rendezvous.rank == 0 && !options_.final_model_dir.empty()) {
    RETURN_IF_ERROR(SaveCheckpoint(options_.final_model_dir, *model_, *optimizer_, position_));
    LogInfo("final model written to %s/checkpoint.pt", options_.final_model_dir);
  }
  RETURN_IF_ERROR(WriteSummary());
  const LoaderStats loaded = loader_->stats();
  if (loaded.held_ahead + loaded.in_flight > 0) {
    LogInfo("rank %d: %d batch(es) fetched ahead were not trained on (%d received, %d in flight)",
            options_.rendezvous.rank, loaded.held_ahead + loaded.in_flight, loaded.held_ahead,
            loaded.in_flight);
  }
  if (stopped_) {
    LogInfo("rank %d stopped on request after step %d", options_.rendezvous.rank, step_);
  }
  return communicator_->Shutdown();
}

// Sums the totals of all ranks; rank 0 writes the summary.
absl::Status RankTrainer::WriteSummary() {
  const RunTotals& mine = metrics_->totals();
  torch::Tensor totals =
      torch::tensor({static_cast<double>(mine.steps), static_cast<double>(mine.images),
                     mine.step_ms, mine.data_wait_ms, static_cast<double>(mine.failed_samples)},
                    torch::kFloat64);
  // NCCL reduces device tensors only.
  totals = totals.to(device_);
  RETURN_IF_ERROR(communicator_->AllReduceSum(totals));
  totals = totals.cpu();
  if (options_.rendezvous.rank != 0) {
    return absl::OkStatus();
  }
  auto value = totals.accessor<double, 1>();
  RunTotals all;
  all.steps = static_cast<uint64_t>(value[0]);
  all.images = static_cast<uint64_t>(value[1]);
  all.step_ms = value[2];
  all.data_wait_ms = value[3];
  // The last step's loss as its progress line and metrics row show it
  // (rank 0's batch), not a mean over ranks no line shows.
  all.last_loss = mine.last_loss;
  all.failed_samples = static_cast<uint64_t>(value[4]);
  const std::string summary = metrics_->WriteSummary(
      all, options_.rendezvous.world_size, absl::ToDoubleSeconds(absl::Now() - run_start_));
  LogInfo("summary %s", summary);
  return absl::OkStatus();
}

absl::Status TrainRank(const TrainerOptions& options) {
  RankTrainer trainer(options);
  if (absl::Status set_up = trainer.SetUp(); !set_up.ok()) {
    if (absl::IsCancelled(set_up) && StopRequested(options)) {
      LogInfo("rank %d stopped on request before training began (%s)", options.rendezvous.rank,
              set_up.message());
      return absl::OkStatus();
    }
    return set_up;
  }
  if (options.training_began != nullptr) {
    options.training_began->store(true);
  }
  RETURN_IF_ERROR(trainer.Train());
  return trainer.WindDown();
}

}  // namespace

absl::Status RunTrainerRank(const TrainerOptions& options) {
  // LibTorch reports errors as exceptions (a TorchScript model that does not
  // take [B,3,H,W], a device out of memory): the rank fails with the message.
  try {
    return TrainRank(options);
  } catch (const c10::Error& error) {
    return absl::InternalError(absl::StrCat("LibTorch: ", error.what_without_backtrace()));
  } catch (const std::exception& error) {
    return absl::InternalError(error.what());
  }
}

}  // namespace heterodl
