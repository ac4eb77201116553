// heterodl-trainer: one trainer rank, started by `heterodl train` with the
// rank's flags (see launcher/train_command.cc). The only executable that
// loads LibTorch.
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "launcher/flags.h"
#include "launcher/stop_signal.h"
#include "src/client/server_discovery.h"
#include "src/common/log.h"
#include "src/common/memory/malloc_tuning.h"
#include "src/common/process/signal_watcher.h"
#include "src/rpc/grpc_lifetime.h"
#include "src/rpc/grpc_logging.h"
#include "src/train/trainer.h"

int main(int argc, char** argv) {
  heterodl::KeepFreedHeapMemory();
  heterodl::StopSignal stop;
  heterodl::SignalWatcher watcher([&stop](int signal) { stop.Trigger(signal); });
  heterodl::KeepGrpcUntilExit();
  heterodl::RouteGrpcLogsToOurs();
  absl::ParseCommandLine(argc, argv);
  if (const auto level = heterodl::ParseLogLevel(absl::GetFlag(FLAGS_log_level))) {
    heterodl::SetMinLogLevel(*level);
  }

  heterodl::TrainerOptions options;
  options.data_servers = absl::StrSplit(absl::GetFlag(FLAGS_data_servers), ',', absl::SkipEmpty());
  options.data_servers_file = absl::GetFlag(FLAGS_data_servers_file);
  options.data_servers_dns = absl::GetFlag(FLAGS_data_servers_dns);
  options.model = absl::GetFlag(FLAGS_model);
  options.steps = absl::GetFlag(FLAGS_steps);
  options.epochs = absl::GetFlag(FLAGS_epochs);
  options.batch_size = static_cast<uint32_t>(absl::GetFlag(FLAGS_batch_size));
  options.seed = absl::GetFlag(FLAGS_seed);
  options.pipeline = absl::GetFlag(FLAGS_pipeline);
  options.learning_rate = absl::GetFlag(FLAGS_lr);
  options.optimizer = absl::GetFlag(FLAGS_optimizer);
  options.momentum = absl::GetFlag(FLAGS_momentum);
  options.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  options.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  options.lr_schedule = absl::GetFlag(FLAGS_lr_schedule);
  options.device = absl::GetFlag(FLAGS_device);
  options.device_step_ms = absl::GetFlag(FLAGS_device_step_ms);
  options.local_rank = absl::GetFlag(FLAGS_local_rank);
  options.precision = absl::GetFlag(FLAGS_precision);
  options.memory_format = absl::GetFlag(FLAGS_memory_format);
  options.bucket_bytes = static_cast<int64_t>(absl::GetFlag(FLAGS_bucket_mb) * (1 << 20));
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  options.resume = absl::GetFlag(FLAGS_resume);
  options.final_model_dir = absl::GetFlag(FLAGS_model_dir);
  options.rank = static_cast<uint32_t>(absl::GetFlag(FLAGS_rank));
  options.world_size = static_cast<uint32_t>(absl::GetFlag(FLAGS_world_size));
  options.master_addr = absl::GetFlag(FLAGS_master_addr);
  options.master_port = absl::GetFlag(FLAGS_master_port);
  options.gloo_hostname = absl::GetFlag(FLAGS_current_host);
  options.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  options.metrics_file = options.rank == 0 ? absl::GetFlag(FLAGS_metrics_file) : "";
  options.sample_log_dir = absl::GetFlag(FLAGS_sample_log_dir);
  options.stop_requested = &stop.stopped();
  absl::StatusOr<std::string> token = heterodl::AuthTokenFromFlags();
  if (!token.ok()) {
    heterodl::LogError("%s", token.status().ToString());
    return 2;
  }
  options.auth_token = *token;
  options.tls = heterodl::TlsFromFlags();
  options.pixel_channel = absl::GetFlag(FLAGS_pixel_channel);
  heterodl::SetLogTag(absl::StrCat("train/", options.rank));
  if (absl::GetFlag(FLAGS_rank) < 0 || options.world_size == 0 ||
      options.rank >= options.world_size ||
      heterodl::ServerSources{options.data_servers, options.data_servers_file,
                              options.data_servers_dns}
          .empty()) {
    heterodl::LogError(
        "heterodl-trainer is started by 'heterodl train'; it needs --rank, "
        "--world_size and --data_servers (or --data_servers_file, --data_servers_dns)");
    return 2;
  }
  absl::Status result = heterodl::RunTrainerRank(options);
  if (!result.ok()) {
    heterodl::LogError("rank %d failed: %s", options.rank, result.ToString());
    return 1;
  }
  return 0;
}
