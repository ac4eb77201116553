#include "src/train/trainer.h"

#include <ATen/autocast_mode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "src/client/remote_loader.h"
#include "src/common/log.h"
#include "src/common/status_macros.h"
#include "src/train/checkpoint.h"
#include "src/train/communicator.h"
#include "src/train/device_feed.h"
#include "src/train/gradient_reducer.h"
#include "src/train/lr_schedule.h"
#include "src/train/metrics_writer.h"
#include "src/train/models.h"
#include "src/train/pinned_memory.h"

namespace heterodl {
namespace {

class SampleLog {
 public:
  absl::Status Open(const std::string& dir, uint32_t rank, bool append) {
    if (dir.empty()) return absl::OkStatus();
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    const std::string path = absl::StrCat(dir, "/rank", rank, ".samples");
    file_.open(path, append ? std::ios::app : std::ios::trunc);
    if (!file_) return absl::UnavailableError(absl::StrCat("cannot create '", path, "'"));
    return absl::OkStatus();
  }
  void Record(const Batch& batch) {
    if (!file_.is_open()) return;
    for (int64_t index : batch.indices) {
      file_ << batch.epoch << ' ' << batch.index << ' ' << index << '\n';
    }
    file_.flush();
  }

 private:
  std::ofstream file_;
};

bool StopRequested(const TrainerOptions& options) {
  return options.stop_requested != nullptr && options.stop_requested->load();
}

absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> CreateOptimizer(
    const TrainerOptions& options, const std::vector<torch::Tensor>& parameters) {
  if (options.optimizer == "sgd") {
    return std::unique_ptr<torch::optim::Optimizer>(
        new torch::optim::SGD(parameters, torch::optim::SGDOptions(options.learning_rate)
                                              .momentum(options.momentum)
                                              .weight_decay(options.weight_decay)));
  }
  if (options.optimizer == "adamw") {
    return std::unique_ptr<torch::optim::Optimizer>(new torch::optim::AdamW(
        parameters,
        torch::optim::AdamWOptions(options.learning_rate).weight_decay(options.weight_decay)));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown optimizer '", options.optimizer, "' (sgd or adamw)"));
}

void SetLearningRate(torch::optim::Optimizer& optimizer, double lr) {
  for (torch::optim::OptimizerParamGroup& group : optimizer.param_groups()) {
    group.options().set_lr(lr);
  }
}

// Whether the forward pass runs under bf16 autocast.
absl::StatusOr<bool> UseBf16(const std::string& precision, const torch::Device& device) {
  if (precision == "auto") return device.is_cuda();
  if (precision == "bf16") return true;
  if (precision == "fp32") return false;
  return absl::InvalidArgumentError(
      absl::StrCat("--precision '", precision, "': expected auto, fp32 or bf16"));
}

// Autocast for the forward pass, on the device's type; off again on exit.
class AutocastScope {
 public:
  AutocastScope(bool enabled, const torch::Device& device)
      : enabled_(enabled), type_(device.type()) {
    if (!enabled_) return;
    at::autocast::set_autocast_dtype(type_, at::kBFloat16);
    at::autocast::set_autocast_enabled(type_, true);
  }
  ~AutocastScope() {
    if (!enabled_) return;
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
  torch::Tensor state =
      torch::tensor({mine.step, static_cast<int64_t>(mine.epoch), mine.next_batch}).to(device);
  RETURN_IF_ERROR(communicator.Broadcast(state));
  state = state.cpu();
  if (state[0].item<int64_t>() != mine.step || state[1].item<int64_t>() != mine.epoch ||
      state[2].item<int64_t>() != mine.next_batch) {
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
    if (active_ && terminal_ && printed_) std::fputc('\n', stderr);
  }
  void Show(const std::string& text) {
    if (!active_) return;
    if (terminal_) {
      std::fprintf(stderr, "\r%s\033[K", text.c_str());
      std::fflush(stderr);
      printed_ = true;
    } else {
      LogInfo("%s", text);
    }
  }

 private:
  const bool active_;
  const bool terminal_;
  bool printed_ = false;
};

absl::Status TrainRank(const TrainerOptions& options) {
  torch::manual_seed(static_cast<uint64_t>(options.seed));
  ASSIGN_OR_RETURN(const torch::Device device, ChooseDevice(options.device, options.local_rank));
  ASSIGN_OR_RETURN(const bool bf16, UseBf16(options.precision, device));
  ASSIGN_OR_RETURN(const LrSchedule::Kind schedule_kind, ParseLrScheduleKind(options.lr_schedule));
  // CPU ranks share the host's cores with each other (and, locally, with the
  // data servers): one intra-op thread each avoids oversubscription.
  if (device.is_cpu()) torch::set_num_threads(1);
  // A CUDA rank's current device is its own GPU, so allocations without an
  // explicit device (NCCL's, autocast's) do not land on GPU 0.
  if (device.is_cuda()) c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->setDevice(device);

  RemoteLoaderOptions loader_options;
  loader_options.servers = options.data_servers;
  loader_options.batch_size = options.batch_size;
  loader_options.rank = options.rank;
  loader_options.world_size = options.world_size;
  loader_options.seed = options.seed;
  loader_options.pipeline = options.pipeline;
  loader_options.connect_timeout = options.connect_timeout;
  loader_options.auth_token = options.auth_token;
  loader_options.tls = options.tls;
  loader_options.pixel_channel = options.pixel_channel;
  if (device.is_cuda()) loader_options.pixel_allocator = PinnedHostAllocator();
  ASSIGN_OR_RETURN(std::unique_ptr<RemoteLoader> loader, RemoteLoader::Connect(loader_options));
  const int num_classes = static_cast<int>(loader->dataset().class_names.size());

  RendezvousOptions rendezvous;
  rendezvous.rank = static_cast<int>(options.rank);
  rendezvous.world_size = static_cast<int>(options.world_size);
  rendezvous.master_addr = options.master_addr;
  rendezvous.master_port = options.master_port;
  rendezvous.local_hostname = options.gloo_hostname;
  rendezvous.timeout = options.connect_timeout;
  rendezvous.use_nccl = device.is_cuda();
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> communicator, CreateCommunicator(rendezvous));

  ASSIGN_OR_RETURN(std::unique_ptr<Model> model, CreateModel(options.model, num_classes));
  model->To(device);
  RETURN_IF_ERROR(SynchronizeModel(*model, *communicator));
  ASSIGN_OR_RETURN(std::unique_ptr<torch::optim::Optimizer> optimizer,
                   CreateOptimizer(options, model->Parameters()));

  TrainingState state;
  if (options.resume && !options.checkpoint_dir.empty()) {
    ASSIGN_OR_RETURN(std::optional<TrainingState> loaded,
                     LoadCheckpoint(options.checkpoint_dir, *model, *optimizer));
    if (loaded) {
      state = *loaded;
      if (options.rank == 0) {
        LogInfo("resuming from %s/checkpoint.pt at step %d (epoch %d, batch %d)",
                options.checkpoint_dir, state.step, state.epoch, state.next_batch);
      }
    }
  }
  RETURN_IF_ERROR(AgreeOnStart(state, *communicator, device));

  GradientReducer reducer(model->Parameters(), *communicator,
                          static_cast<size_t>(options.bucket_bytes));
  ASSIGN_OR_RETURN(std::unique_ptr<MetricsWriter> metrics,
                   MetricsWriter::Open(options.metrics_file, options.rank, state.step > 0));
  SampleLog sample_log;
  RETURN_IF_ERROR(sample_log.Open(options.sample_log_dir, options.rank, state.step > 0));

  const int64_t steps_per_epoch = loader->size();
  int epochs = options.epochs;
  if (options.steps > 0) {
    epochs = static_cast<int>((options.steps + steps_per_epoch - 1) / steps_per_epoch);
  }
  const int64_t total_steps = options.steps > 0 ? options.steps : steps_per_epoch * epochs;
  const LrSchedule schedule{options.learning_rate, options.warmup_steps, total_steps,
                            schedule_kind};
  if (options.rank == 0) {
    LogInfo(
        "training %s on %s (%s%s) over %s: %d samples, %d classes, %d ranks, batch %d, %d "
        "step(s) per epoch, %d step(s), %d gradient bucket(s)",
        options.model, device.str(), bf16 ? "bf16 autocast" : "fp32",
        device.is_cuda() ? ", pinned host buffers" : "", communicator->backend(),
        loader->dataset().num_samples, num_classes, options.world_size, options.batch_size,
        steps_per_epoch, total_steps, reducer.num_buckets());
  }

  int64_t last_saved_step = state.step;
  auto save = [&](const TrainingState& at) -> absl::Status {
    last_saved_step = at.step;
    if (options.rank != 0 || options.checkpoint_dir.empty()) return absl::OkStatus();
    RETURN_IF_ERROR(SaveCheckpoint(options.checkpoint_dir, *model, *optimizer, at));
    LogInfo("checkpoint at step %d written to %s/checkpoint.pt", at.step, options.checkpoint_dir);
    return absl::OkStatus();
  };

  model->SetTraining(true);
  BatchFeeder feeder(*loader, device, /*convert=*/options.device_step_ms <= 0);
  ProgressLine progress(options.rank == 0);
  const absl::Time run_start = absl::Now();
  int64_t step = state.step;
  bool stopped = false;
  TrainingState position = state;  // after the last trained batch
  for (uint32_t epoch = state.epoch; static_cast<int>(epoch) < epochs && !stopped; ++epoch) {
    if (options.steps > 0 && step >= options.steps) break;
    RETURN_IF_ERROR(feeder.StartEpoch(epoch, epoch == state.epoch ? state.next_batch : 0));
    absl::Time step_start = absl::Now();
    ASSIGN_OR_RETURN(std::optional<DeviceBatch> current, feeder.Next());
    double wait_ms = feeder.last_wait_ms();
    while (current) {
      const double lr = schedule.At(step);
      SetLearningRate(*optimizer, lr);
      torch::Tensor loss;
      if (options.device_step_ms > 0) {
        // A modelled accelerator: busy for the step's time, the CPU idle.
        absl::SleepFor(absl::Milliseconds(options.device_step_ms));
        loss = torch::zeros({});
      } else {
        optimizer->zero_grad();
        {
          AutocastScope autocast(bf16, device);
          loss =
              torch::nn::functional::cross_entropy(model->Forward(current->input), current->labels);
        }
        loss.backward();  // gradient buckets start all-reducing during this
        RETURN_IF_ERROR(reducer.FinishStep());
        optimizer->step();
      }
      position = {step + 1, current->host.epoch, current->host.index + 1};

      // On CUDA the step is still running: fetch and queue the next batch now.
      const bool last = options.steps > 0 && step + 1 >= options.steps;
      std::optional<DeviceBatch> next;
      if (!last) {
        ASSIGN_OR_RETURN(next, feeder.Next());
        wait_ms += feeder.last_wait_ms();
      }
      // All ranks stop at the same step: the flag is summed across ranks.
      torch::Tensor stop = torch::tensor({StopRequested(options) ? 1.0f : 0.0f}).to(device);
      RETURN_IF_ERROR(communicator->AllReduceSum(stop));
      const double loss_value = loss.item<double>();  // waits for the step
      sample_log.Record(current->host);

      const absl::Time now = absl::Now();
      StepRecord record;
      record.step = static_cast<uint64_t>(step);
      record.epoch = epoch;
      record.step_ms = absl::ToDoubleMilliseconds(now - step_start);
      record.data_wait_ms = wait_ms;
      record.loss = loss_value;
      record.batch_size = static_cast<uint32_t>(current->host.size());
      record.failed_samples = static_cast<uint32_t>(current->host.failed);
      record.learning_rate = lr;
      metrics->RecordStep(record);
      progress.Show(absl::StrFormat(
          "epoch %d step %d/%d  loss %.4f  lr %.4g  step %.1f ms  %.0f img/s  data wait %.1f ms "
          "(%.0f%%)",
          epoch, step + 1, total_steps, loss_value, lr, record.step_ms,
          record.batch_size * options.world_size * 1000.0 / record.step_ms, wait_ms,
          100.0 * wait_ms / record.step_ms));
      ++step;
      step_start = now;
      wait_ms = 0;
      current = std::move(next);

      if (stop.cpu().item<float>() > 0) {
        stopped = true;
        RETURN_IF_ERROR(save(position));
        break;
      }
      if (options.checkpoint_every > 0 && step % options.checkpoint_every == 0) {
        RETURN_IF_ERROR(save(position));
      }
      if (last) break;
    }
  }
  if (!stopped && position.step != last_saved_step) RETURN_IF_ERROR(save(position));
  if (options.rank == 0 && !options.final_model_dir.empty()) {
    RETURN_IF_ERROR(SaveCheckpoint(options.final_model_dir, *model, *optimizer, position));
    LogInfo("final model written to %s/checkpoint.pt", options.final_model_dir);
  }

  // Sum the totals of all ranks for the summary.
  const RunTotals& mine = metrics->totals();
  torch::Tensor totals = torch::tensor(
      {static_cast<double>(mine.steps), static_cast<double>(mine.images), mine.step_ms,
       mine.data_wait_ms, mine.last_loss, static_cast<double>(mine.failed_samples)},
      torch::kFloat64);
  // NCCL reduces device tensors only.
  totals = totals.to(device);
  RETURN_IF_ERROR(communicator->AllReduceSum(totals));
  totals = totals.cpu();
  if (options.rank == 0) {
    auto value = totals.accessor<double, 1>();
    RunTotals all;
    all.steps = static_cast<uint64_t>(value[0]);
    all.images = static_cast<uint64_t>(value[1]);
    all.step_ms = value[2];
    all.data_wait_ms = value[3];
    all.last_loss = value[4] / options.world_size;
    all.failed_samples = static_cast<uint64_t>(value[5]);
    const std::string summary = metrics->WriteSummary(
        all, options.world_size, absl::ToDoubleSeconds(absl::Now() - run_start));
    LogInfo("summary %s", summary);
  }
  if (stopped) LogInfo("rank %d stopped on request after step %d", options.rank, step);
  return communicator->Shutdown();
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
