// `heterodl bench augment|transport ...`: benchmarks (bench/).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/augment_bench.h"
#include "bench/feed_bench.h"
#include "bench/step_bench.h"
#include "bench/transport_bench.h"
#include "launcher/commands.h"
#include "launcher/flags.h"
#include "src/common/log.h"
#include "src/common/process/child_process.h"

ABSL_FLAG(bool, no_peer, false, "bench: skip the peer (torchvision) measurement");
ABSL_FLAG(double, seconds, 3.0, "bench: seconds per measurement");
ABSL_FLAG(int32_t, rounds, 0,
          "bench: rounds of alternated measurements (0: the benchmark's own, 3 for augment, 5 "
          "for feed)");
ABSL_FLAG(std::string, report, "", "bench step: write report.md and a plot to this directory");
ABSL_FLAG(int32_t, connections, 2,
          "bench transport: TCP connections per server for gRPC (the loader's default)");
ABSL_FLAG(std::vector<std::string>, batch_sizes,
          std::vector<std::string>({"64", "128", "256", "512"}),
          "bench transport: batch sizes to measure (224x224x3 images)");
ABSL_FLAG(bool, peers, false,
          "bench feed: also run the system-level peers (heterodl's Python loader, PyTorch "
          "DataLoader, tf.data service) on the same files; installs TensorFlow into .venv-peers "
          "first (bench/peers/setup.sh)");
ABSL_FLAG(std::string, tensorflow_python, HETERODL_TENSORFLOW_PYTHON,
          "bench feed --peers: Python with TensorFlow");
ABSL_FLAG(std::string, pillow_simd_python, HETERODL_PILLOW_SIMD_PYTHON,
          "bench augment: Python whose PIL is Pillow-SIMD, for a third peer (the default is "
          "made by bench/peers/setup_pillow_simd.sh and skipped when missing; a path given and "
          "missing is a note in the report; '' for none)");

namespace heterodl {

namespace {

int PrintReport(const absl::StatusOr<std::string>& report) {
  if (!report.ok()) {
    LogError("%s", report.status().ToString());
    return kExitFailure;
  }
  std::printf("%s\n", report->c_str());
  return kExitOk;
}

// Whether a flag shared with other commands holds something else than its
// default (this Abseil cannot tell whether it was given at all).
template <typename T>
bool ChangedFromDefault(const absl::Flag<T>& flag) {
  const absl::CommandLineFlag& handle = absl::GetFlagReflectionHandle(flag);
  return handle.CurrentValue() != handle.DefaultValue();
}

int RunAugment() {
  AugmentBenchOptions options;
  options.dataset = absl::GetFlag(FLAGS_dataset);
  if (options.dataset.empty()) {
    LogError("bench augment needs --dataset DIR");
    return kExitUsage;
  }
  options.pipeline = absl::GetFlag(FLAGS_pipeline);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.seconds = absl::GetFlag(FLAGS_seconds);
  if (absl::GetFlag(FLAGS_rounds) > 0) {
    options.rounds = absl::GetFlag(FLAGS_rounds);
  }
  options.peer = !absl::GetFlag(FLAGS_no_peer);
  options.python = PythonFlagOr(HETERODL_DEFAULT_PYTHON);
  options.peer_script = HETERODL_PEER_AUGMENT_SCRIPT;
  options.pillow_simd_python = absl::GetFlag(FLAGS_pillow_simd_python);
  // The default venv is optional: missing, it is no peer and no note; a
  // path asked for and missing is a note in the report.
  if (!ChangedFromDefault(FLAGS_pillow_simd_python) &&
      !std::filesystem::exists(options.pillow_simd_python)) {
    options.pillow_simd_python.clear();
  }
  options.json = absl::GetFlag(FLAGS_json);
  return PrintReport(RunAugmentBench(options));
}

int RunStep() {
  StepBenchOptions options;
  absl::StatusOr<std::string> self = SelfExecutable();
  if (!self.ok()) {
    return PrintReport(self.status());
  }
  options.heterodl = *self;
  options.dataset = absl::GetFlag(FLAGS_dataset);
  options.model = absl::GetFlag(FLAGS_model);
  options.batch_size = absl::GetFlag(FLAGS_batch_size);
  if (!absl::GetFlag(FLAGS_pipeline).empty()) {
    options.pipeline = absl::GetFlag(FLAGS_pipeline);
  }
  if (absl::GetFlag(FLAGS_steps) > 0) {
    options.steps = static_cast<int>(absl::GetFlag(FLAGS_steps));
  }
  options.warmup_steps = std::min(options.warmup_steps, options.steps / 4);
  options.device_step_ms = absl::GetFlag(FLAGS_device_step_ms);
  options.prices = absl::GetFlag(FLAGS_prices);
  options.gpu_instance = absl::GetFlag(FLAGS_gpu_instance);
  if (!absl::GetFlag(FLAGS_data_instance).empty()) {
    options.data_instance = absl::GetFlag(FLAGS_data_instance).front();
  }
  options.report_dir = absl::GetFlag(FLAGS_report);
  options.json = absl::GetFlag(FLAGS_json);
  return PrintReport(RunStepBench(options));
}

// bench feed --python-dataset: the user's own Dataset through PyTorch's
// DataLoader and through heterodl's workers, side by side
// (bench/peers/feed_python_dataset.py, which prints the report).
int RunPythonDatasetFeed(const std::string& self) {
  std::vector<std::string> arguments = {
      PythonFlagOr(HETERODL_DEFAULT_PYTHON),
      (std::filesystem::path(HETERODL_PEERS_DIR) / "feed_python_dataset.py").string(),
      "--dataset",
      absl::GetFlag(FLAGS_python_dataset),
      "--heterodl",
      self,
      "--python-path",
      HETERODL_PEERS_DIR,
      "--batch-size",
      absl::StrCat(ChangedFromDefault(FLAGS_batch_size) ? absl::GetFlag(FLAGS_batch_size) : 64),
      "--seconds",
      absl::StrCat(ChangedFromDefault(FLAGS_seconds) ? absl::GetFlag(FLAGS_seconds) : 10.0)};
  if (absl::GetFlag(FLAGS_python_workers) > 0) {
    arguments.push_back("--workers");
    arguments.push_back(absl::StrCat(absl::GetFlag(FLAGS_python_workers)));
  }
  for (const std::string& folder : absl::GetFlag(FLAGS_python_path)) {
    arguments.push_back("--python-path");
    arguments.push_back(folder);
  }
  if (!absl::GetFlag(FLAGS_dataset).empty()) {
    arguments.push_back("--images");
    arguments.push_back(absl::GetFlag(FLAGS_dataset));
  }
  absl::StatusOr<ChildProcess> bench = ChildProcess::Spawn(
      arguments, {.extra_env = {absl::StrCat("PYTHONPATH=", HETERODL_PYTHON_MODULE_DIR)}});
  if (!bench.ok()) {
    return PrintReport(bench.status());
  }
  return bench->Wait() == 0 ? kExitOk : kExitFailure;
}

int RunFeed() {
  FeedBenchOptions options;
  absl::StatusOr<std::string> self = SelfExecutable();
  if (!self.ok()) {
    return PrintReport(self.status());
  }
  if (!absl::GetFlag(FLAGS_python_dataset).empty()) {
    return RunPythonDatasetFeed(*self);
  }
  options.heterodl = *self;
  options.dataset = absl::GetFlag(FLAGS_dataset);
  if (options.dataset.empty()) {
    LogError("bench feed needs --dataset DIR");
    return kExitUsage;
  }
  options.pipeline = absl::GetFlag(FLAGS_pipeline);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.worker_nice = absl::GetFlag(FLAGS_worker_nice);
  options.shuffle_block_shards = absl::GetFlag(FLAGS_shuffle_block_shards);
  if (IsObjectUrl(options.dataset)) {
    // The bucket read as serve reads it: its server and the engine's
    // measurement alike.
    absl::StatusOr<std::optional<S3Options>> s3 = S3OptionsFromFlags(options.dataset);
    if (!s3.ok()) {
      LogError("%s", std::string(s3.status().message()));
      return kExitUsage;
    }
    options.files.s3 = *std::move(s3);
    options.serve_flags = ObjectStorageServeArguments();
  }
  // 256 unless asked: the batch of the yardsticks, not the trainer's default.
  if (ChangedFromDefault(FLAGS_batch_size)) {
    options.batch_size = absl::GetFlag(FLAGS_batch_size);
  }
  if (options.batch_size < 1 || options.batch_size > 4096) {
    LogError("--batch-size must be in [1, 4096]");
    return kExitUsage;
  }
  options.device_step_ms = absl::GetFlag(FLAGS_device_step_ms);
  if (ChangedFromDefault(FLAGS_seconds)) {
    options.seconds = absl::GetFlag(FLAGS_seconds);
  }
  // 0 (unset): the benchmark's own default, so that any count asked for,
  // the augment benchmark's 3 included, is taken.
  if (absl::GetFlag(FLAGS_rounds) > 0) {
    options.rounds = absl::GetFlag(FLAGS_rounds);
  }
  options.peers = absl::GetFlag(FLAGS_peers);
  options.python = PythonFlagOr(HETERODL_DEFAULT_PYTHON);
  options.python_path = HETERODL_PYTHON_MODULE_DIR;
  options.tensorflow_python = absl::GetFlag(FLAGS_tensorflow_python);
  options.peers_dir = HETERODL_PEERS_DIR;
  options.json = absl::GetFlag(FLAGS_json);
  return PrintReport(RunFeedBench(options));
}

int RunTransport() {
  TransportBenchOptions options;
  absl::StatusOr<std::string> self = SelfExecutable();
  if (!self.ok()) {
    return PrintReport(self.status());
  }
  options.heterodl = *self;
  options.seconds = absl::GetFlag(FLAGS_seconds);
  options.connections = absl::GetFlag(FLAGS_connections);
  options.batch_sizes.clear();
  for (const std::string& text : absl::GetFlag(FLAGS_batch_sizes)) {
    int size = 0;
    if (!absl::SimpleAtoi(text, &size) || size < 1 || size > 4096) {
      return PrintReport(absl::InvalidArgumentError(
          absl::StrCat("--batch_sizes: '", text, "' is not a batch size in [1, 4096]")));
    }
    options.batch_sizes.push_back(size);
  }
  options.json = absl::GetFlag(FLAGS_json);
  return PrintReport(RunTransportBench(options));
}

}  // namespace

int RunBenchCommand(const CommandContext& context) {
  const std::vector<std::string>& arguments = context.arguments;
  if (arguments.size() == 1 && arguments[0] == "augment") {
    return RunAugment();
  }
  if (arguments.size() == 1 && arguments[0] == "transport") {
    return RunTransport();
  }
  if (arguments.size() == 1 && arguments[0] == "step") {
    return RunStep();
  }
  if (arguments.size() == 1 && arguments[0] == "feed") {
    return RunFeed();
  }
  LogError(
      "usage: heterodl bench augment --dataset DIR [--pipeline SPEC] [--threads N] "
      "[--json] [--no-peer]\n       heterodl bench transport [--seconds S] [--json]\n"
      "       heterodl bench step --dataset DIR [--model M] [--batch-size B] [--steps N] "
      "[--device-step-ms MS] [--report DIR] [--json]\n"
      "       heterodl bench feed --dataset DIR [--threads N] [--batch-size B] "
      "[--device-step-ms MS] [--seconds S] [--peers] [--json]\n"
      "       heterodl bench feed --python-dataset MODULE:CALLABLE [--python-path DIR] "
      "[--python-workers N] [--dataset DIR] [--batch-size B] [--seconds S]");
  return kExitUsage;
}

}  // namespace heterodl
