#include "launcher/flag_checks.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "launcher/command_line.h"
#include "launcher/flags.h"
#include "launcher/trainer_flags.h"
#include "src/cluster/cluster_view.h"
#include "src/common/log.h"
#include "src/common/net/host_port.h"
#include "src/common/status_macros.h"
#include "src/data/sample_dataset.h"

namespace heterodl {
namespace {

template <typename T>
absl::Status InRange(absl::string_view name, T value, T low, T high, absl::string_view why = "") {
  if (value >= low && value <= high) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(DashedFlag(name), " must be in [", low, ", ", high, "]", why, ", got ", value));
}

absl::Status AtLeast(absl::string_view name, double value, double low) {
  if (value >= low) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(DashedFlag(name), " must be at least ", low, ", got ", value));
}

absl::Status PositiveDuration(absl::string_view name, absl::Duration value) {
  if (value > absl::ZeroDuration()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      DashedFlag(name), " must be a positive duration, got ", absl::FormatDuration(value)));
}

absl::Status CheckModel(const std::string& model) {
  if (model == "small_cnn" || model == "resnet18" || model == "resnet50") {
    return absl::OkStatus();
  }
  std::error_code error;
  if (std::filesystem::is_regular_file(model, error)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--model must be small_cnn, resnet18, resnet50 or a TorchScript file; '", model,
                   "' is none of them (no such file)"));
}

absl::Status CheckAddress(const std::string& address) {
  if (address.empty()) {
    return absl::OkStatus();
  }
  absl::StatusOr<HostPort> parsed = SplitHostPort(address);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--address: ", parsed.status().message()));
  }
  return absl::OkStatus();
}

}  // namespace

int MaxThreads(int cores) { return std::max(64, 8 * cores); }

absl::StatusOr<int> MetricsPortFromFlags(const std::string& command) {
  int port = absl::GetFlag(FLAGS_metrics_port);
  std::string source = "--metrics-port";
  if (port == -1) {
    const Environment environment = CurrentEnvironment();
    const auto variable = environment.find("HETERODL_METRICS_PORT");
    if (variable == environment.end() || variable->second.empty()) {
      return -1;
    }
    source = "HETERODL_METRICS_PORT";
    if (!absl::SimpleAtoi(variable->second, &port)) {
      return absl::InvalidArgumentError(
          absl::StrCat(command, ": HETERODL_METRICS_PORT must be a port number, got '",
                       variable->second.substr(0, 32), "'"));
    }
  }
  if (port < -1 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        command, ": ", source, " must be -1 (off), 0 (any free port) or a port, got ", port));
  }
  return port;
}

absl::Status CheckFlagValues() {
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int32_t port = absl::GetFlag(FLAGS_port);
  if (port != -1) {
    RETURN_IF_ERROR(InRange<int32_t>("port", port, 0, 65535, " (0: any free port)"));
  }
  RETURN_IF_ERROR(InRange<int32_t>("pixel_port", absl::GetFlag(FLAGS_pixel_port), -1, 65535,
                                   " (-1: off, 0: any free port)"));
  RETURN_IF_ERROR(InRange<int32_t>("metrics_port", absl::GetFlag(FLAGS_metrics_port), -1, 65535,
                                   " (-1: off, 0: any free port)"));
  RETURN_IF_ERROR(InRange<int32_t>("master_port", absl::GetFlag(FLAGS_master_port), 0, 65535));
  RETURN_IF_ERROR(CheckAddress(absl::GetFlag(FLAGS_address)));
  RETURN_IF_ERROR(InRange<int32_t>(
      "threads", absl::GetFlag(FLAGS_threads), 0, MaxThreads(cores),
      absl::StrCat(" (0: one per core; at most 8 per core of this ", cores, "-core machine)")));
  RETURN_IF_ERROR(InRange<int32_t>("worker_nice", absl::GetFlag(FLAGS_worker_nice), 0, 19));
  RETURN_IF_ERROR(
      InRange<int64_t>("max_pixels", absl::GetFlag(FLAGS_max_pixels), 1, int64_t{1} << 40));
  RETURN_IF_ERROR(InRange<int64_t>("max_file_mb", absl::GetFlag(FLAGS_max_file_mb), 1, 1 << 20));
  RETURN_IF_ERROR(
      InRange<int64_t>("synthetic", absl::GetFlag(FLAGS_synthetic), 0, int64_t{1} << 40));
  RETURN_IF_ERROR(InRange<int32_t>("max_streams", absl::GetFlag(FLAGS_max_streams), 1, 1 << 20));
  RETURN_IF_ERROR(
      InRange<int64_t>("max_stream_mb", absl::GetFlag(FLAGS_max_stream_mb), 1, int64_t{1} << 30));
  RETURN_IF_ERROR(InRange<int32_t>("max_streams_per_host",
                                   absl::GetFlag(FLAGS_max_streams_per_host), 0, 1 << 20,
                                   " (0: half of --max-streams)"));
  RETURN_IF_ERROR(InRange<int64_t>("max_memory_mb", absl::GetFlag(FLAGS_max_memory_mb), 0,
                                   int64_t{1} << 30, " (0: half of this machine's memory)"));
  RETURN_IF_ERROR(PositiveDuration("unread_timeout", absl::GetFlag(FLAGS_unread_timeout)));
  RETURN_IF_ERROR(InRange<int64_t>("max_pipeline_cost", absl::GetFlag(FLAGS_max_pipeline_cost), 1,
                                   int64_t{1} << 40));
  RETURN_IF_ERROR(PositiveDuration("idle_timeout", absl::GetFlag(FLAGS_idle_timeout)));
  RETURN_IF_ERROR(PositiveDuration("startup_timeout", absl::GetFlag(FLAGS_startup_timeout)));
  RETURN_IF_ERROR(PositiveDuration("connect_timeout", absl::GetFlag(FLAGS_connect_timeout)));

  RETURN_IF_ERROR(InRange<int32_t>("batch_size", absl::GetFlag(FLAGS_batch_size), 1, 65536));
  RETURN_IF_ERROR(CheckModel(absl::GetFlag(FLAGS_model)));
  RETURN_IF_ERROR(InRange<int64_t>("steps", absl::GetFlag(FLAGS_steps), 0, int64_t{1} << 40,
                                   " (0: run --epochs)"));
  RETURN_IF_ERROR(InRange<int32_t>("epochs", absl::GetFlag(FLAGS_epochs), 1, 1 << 20));
  RETURN_IF_ERROR(InRange<int32_t>("ranks", absl::GetFlag(FLAGS_ranks), 0, 4096));
  RETURN_IF_ERROR(InRange<int32_t>("servers", absl::GetFlag(FLAGS_servers), 1, 64));
  RETURN_IF_ERROR(InRange<int32_t>("ranks_per_host", absl::GetFlag(FLAGS_ranks_per_host), 0, 4096));
  RETURN_IF_ERROR(AtLeast("lr", absl::GetFlag(FLAGS_lr), 0));
  RETURN_IF_ERROR(InRange<double>("momentum", absl::GetFlag(FLAGS_momentum), 0, 1));
  RETURN_IF_ERROR(
      InRange<double>("max_failed_fraction", absl::GetFlag(FLAGS_max_failed_fraction), 0, 1));
  RETURN_IF_ERROR(AtLeast("weight_decay", absl::GetFlag(FLAGS_weight_decay), 0));
  RETURN_IF_ERROR(AtLeast("warmup_steps", absl::GetFlag(FLAGS_warmup_steps), 0));
  RETURN_IF_ERROR(AtLeast("checkpoint_every", absl::GetFlag(FLAGS_checkpoint_every), 0));
  RETURN_IF_ERROR(AtLeast("device_step_ms", absl::GetFlag(FLAGS_device_step_ms), 0));
  RETURN_IF_ERROR(AtLeast("demand", absl::GetFlag(FLAGS_demand), 0));
  RETURN_IF_ERROR(InRange<double>("max_stall", absl::GetFlag(FLAGS_max_stall), 0, 0.99));
  RETURN_IF_ERROR(InRange<double>("bucket_mb", absl::GetFlag(FLAGS_bucket_mb), 0.001, 65536));
  // The trainer's text choices, parsed as heterodl-trainer will parse them.
  TrainerOptions trainer;
  RETURN_IF_ERROR(ParseTrainerChoices(trainer));
  if (!ParseLogLevel(absl::GetFlag(FLAGS_log_level))) {
    return absl::InvalidArgumentError(
        absl::StrCat("--log-level must be one of debug, info, warning, error; got '",
                     absl::GetFlag(FLAGS_log_level), "'"));
  }
  RETURN_IF_ERROR(InRange<int32_t>("images", absl::GetFlag(FLAGS_images), 1, 10'000'000));
  RETURN_IF_ERROR(ParseSampleFormats(absl::GetFlag(FLAGS_formats)).status());
  RETURN_IF_ERROR(ParseSampleTask(absl::GetFlag(FLAGS_task)).status());
  RETURN_IF_ERROR(ParseSampleImageSize(absl::GetFlag(FLAGS_sample_size)).status());
  return absl::OkStatus();
}

}  // namespace heterodl
