#include "src/train/trainer.h"

#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/client/remote_loader.h"
#include "src/common/log.h"
#include "src/common/status_macros.h"
#include "src/train/communicator.h"
#include "src/train/metrics_writer.h"
#include "src/train/models.h"

namespace heterodl {
namespace {

// ImageNet statistics, applied on the device (the wire carries uint8).
constexpr float kMean[3] = {0.485f * 255, 0.456f * 255, 0.406f * 255};
constexpr float kStd[3] = {0.229f * 255, 0.224f * 255, 0.225f * 255};

// uint8 NHWC batch -> normalized float NCHW. The uint8 tensor borrows the
// batch's buffer: no copy until the float conversion.
class InputNormalizer {
 public:
  InputNormalizer()
      : mean_(torch::tensor({kMean[0], kMean[1], kMean[2]}).view({1, 3, 1, 1})),
        std_(torch::tensor({kStd[0], kStd[1], kStd[2]}).view({1, 3, 1, 1})) {}

  torch::Tensor operator()(Batch& batch) const {
    torch::Tensor pixels =
        torch::from_blob(batch.images.data(),
                         {batch.size(), batch.height, batch.width, batch.channels}, torch::kUInt8);
    return (pixels.permute({0, 3, 1, 2}).to(torch::kFloat32) - mean_) / std_;
  }

 private:
  torch::Tensor mean_;
  torch::Tensor std_;
};

class SampleLog {
 public:
  absl::Status Open(const std::string& dir, uint32_t rank) {
    if (dir.empty()) return absl::OkStatus();
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    const std::string path = absl::StrCat(dir, "/rank", rank, ".samples");
    file_.open(path, std::ios::trunc);
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

}  // namespace

absl::Status RunTrainerRank(const TrainerOptions& options) {
  torch::manual_seed(static_cast<uint64_t>(options.seed));
  // Ranks share the host's cores with each other (and, locally, with the
  // data servers): one intra-op thread each avoids oversubscription.
  torch::set_num_threads(1);

  RemoteLoaderOptions loader_options;
  loader_options.servers = options.data_servers;
  loader_options.batch_size = options.batch_size;
  loader_options.rank = options.rank;
  loader_options.world_size = options.world_size;
  loader_options.seed = options.seed;
  loader_options.pipeline = options.pipeline;
  loader_options.connect_timeout = options.connect_timeout;
  loader_options.auth_token = options.auth_token;
  ASSIGN_OR_RETURN(std::unique_ptr<RemoteLoader> loader, RemoteLoader::Connect(loader_options));
  const int num_classes = static_cast<int>(loader->dataset().class_names.size());

  RendezvousOptions rendezvous;
  rendezvous.rank = static_cast<int>(options.rank);
  rendezvous.world_size = static_cast<int>(options.world_size);
  rendezvous.master_addr = options.master_addr;
  rendezvous.master_port = options.master_port;
  rendezvous.local_hostname = options.gloo_hostname;
  rendezvous.timeout = options.connect_timeout;
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> communicator, CreateGlooCommunicator(rendezvous));

  ASSIGN_OR_RETURN(torch::nn::AnyModule model, CreateModel(options.model, num_classes));
  std::vector<torch::Tensor> parameters = model.ptr()->parameters();
  // Every rank starts from rank 0's weights.
  {
    std::vector<torch::Tensor> values;
    for (torch::Tensor& p : parameters) values.push_back(p.detach().clone());
    torch::NoGradGuard no_grad;
    if (options.rank != 0) {
      for (torch::Tensor& v : values) v.zero_();
    }
    for (torch::Tensor& v : values) {
      RETURN_IF_ERROR(communicator->AllReduceSum(v));
    }
    for (size_t i = 0; i < parameters.size(); ++i) parameters[i].copy_(values[i]);
  }
  torch::optim::SGD optimizer(
      parameters, torch::optim::SGDOptions(options.learning_rate).momentum(0.9).weight_decay(1e-4));

  ASSIGN_OR_RETURN(std::unique_ptr<MetricsWriter> metrics,
                   MetricsWriter::Open(options.metrics_file, options.rank));
  SampleLog sample_log;
  RETURN_IF_ERROR(sample_log.Open(options.sample_log_dir, options.rank));

  const int64_t steps_per_epoch = loader->size();
  int epochs = options.epochs;
  if (options.steps > 0) {
    epochs = static_cast<int>((options.steps + steps_per_epoch - 1) / steps_per_epoch);
  }
  if (options.rank == 0) {
    LogInfo(
        "training %s on %d samples (%d classes), %d ranks, batch %d, %d step(s) per epoch, %d "
        "epoch(s)",
        options.model, loader->dataset().num_samples, num_classes, options.world_size,
        options.batch_size, steps_per_epoch, epochs);
  }

  const InputNormalizer to_input;
  model.ptr()->train();
  const absl::Time run_start = absl::Now();
  uint64_t step = 0;
  bool stopped = false;
  for (int epoch = 0; epoch < epochs && !stopped; ++epoch) {
    RETURN_IF_ERROR(loader->SetEpoch(static_cast<uint32_t>(epoch)));
    absl::Time step_start = absl::Now();
    while (true) {
      if (options.steps > 0 && static_cast<int64_t>(step) >= options.steps) break;
      // All ranks stop at the same step: the flag is summed across ranks.
      torch::Tensor stop = torch::tensor({StopRequested(options) ? 1.0f : 0.0f});
      RETURN_IF_ERROR(communicator->AllReduceSum(stop));
      if (stop.item<float>() > 0) {
        stopped = true;
        break;
      }
      ASSIGN_OR_RETURN(std::optional<Batch> batch, loader->Next());
      if (!batch) break;
      const double wait_ms = absl::ToDoubleMilliseconds(absl::Now() - step_start);

      torch::Tensor input = to_input(*batch);
      torch::Tensor labels = torch::from_blob(batch->labels.data(), {batch->size()}, torch::kInt64);
      optimizer.zero_grad();
      torch::Tensor loss = torch::nn::functional::cross_entropy(model.forward(input), labels);
      loss.backward();
      std::vector<torch::Tensor> grads;
      for (torch::Tensor& p : parameters) {
        if (p.grad().defined()) grads.push_back(p.grad());
      }
      RETURN_IF_ERROR(communicator->AllReduceMean(grads));
      optimizer.step();
      sample_log.Record(*batch);

      const absl::Time now = absl::Now();
      StepRecord record;
      record.step = step;
      record.epoch = static_cast<uint32_t>(epoch);
      record.step_ms = absl::ToDoubleMilliseconds(now - step_start);
      record.data_wait_ms = wait_ms;
      record.loss = loss.item<double>();
      record.batch_size = static_cast<uint32_t>(batch->size());
      record.failed_samples = static_cast<uint32_t>(batch->failed);
      metrics->RecordStep(record);
      if (options.rank == 0) {
        LogInfo("epoch %d step %d/%d  loss %.4f  step %.1f ms  data wait %.1f ms (%.0f%%)", epoch,
                step + 1, options.steps > 0 ? options.steps : steps_per_epoch * epochs, record.loss,
                record.step_ms, wait_ms, 100.0 * wait_ms / record.step_ms);
      }
      ++step;
      step_start = now;
    }
  }

  // Sum the totals of all ranks for the summary.
  const RunTotals& mine = metrics->totals();
  torch::Tensor totals = torch::tensor(
      {static_cast<double>(mine.steps), static_cast<double>(mine.images), mine.step_ms,
       mine.data_wait_ms, mine.last_loss, static_cast<double>(mine.failed_samples)},
      torch::kFloat64);
  RETURN_IF_ERROR(communicator->AllReduceSum(totals));
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
  if (stopped) LogInfo("rank %d stopped on request after %d steps", options.rank, step);
  return absl::OkStatus();
}

}  // namespace heterodl
