#include "launcher/trainer_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "launcher/flags.h"
#include "src/common/status_macros.h"
#include "src/train/lr_schedule.h"
#include "src/train/train_choices.h"

namespace heterodl {

absl::Status ParseTrainerChoices(TrainerOptions& options) {
  ASSIGN_OR_RETURN(options.optimizer.kind, ParseOptimizerKind(absl::GetFlag(FLAGS_optimizer)));
  ASSIGN_OR_RETURN(options.optimizer.schedule,
                   ParseLrScheduleKind(absl::GetFlag(FLAGS_lr_schedule)));
  ASSIGN_OR_RETURN(options.device, ParseDeviceKind(absl::GetFlag(FLAGS_device)));
  ASSIGN_OR_RETURN(options.precision, ParsePrecision(absl::GetFlag(FLAGS_precision)));
  ASSIGN_OR_RETURN(options.memory_format, ParseMemoryFormat(absl::GetFlag(FLAGS_memory_format)));
  return absl::OkStatus();
}

absl::StatusOr<TrainerOptions> TrainerOptionsFromFlags() {
  TrainerOptions options;
  RemoteLoaderOptions& data = options.data;
  data.servers.fixed = absl::StrSplit(absl::GetFlag(FLAGS_data_servers), ',', absl::SkipEmpty());
  data.servers.servers_file = absl::GetFlag(FLAGS_data_servers_file);
  data.servers.dns_name = absl::GetFlag(FLAGS_data_servers_dns);
  data.batch_size = static_cast<uint32_t>(absl::GetFlag(FLAGS_batch_size));
  data.seed = absl::GetFlag(FLAGS_seed);
  data.shuffle_block_shards = absl::GetFlag(FLAGS_shuffle_block_shards);
  data.pipeline = absl::GetFlag(FLAGS_pipeline);
  data.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  ASSIGN_OR_RETURN(data.auth_token, AuthTokenFromFlags());
  data.tls = TlsFromFlags();
  data.pixel_channel = absl::GetFlag(FLAGS_pixel_channel);
  data.max_failed_fraction = absl::GetFlag(FLAGS_max_failed_fraction);

  RendezvousOptions& rendezvous = options.rendezvous;
  rendezvous.rank = absl::GetFlag(FLAGS_rank);
  rendezvous.world_size = absl::GetFlag(FLAGS_world_size);
  rendezvous.master_addr = absl::GetFlag(FLAGS_master_addr);
  rendezvous.master_port = absl::GetFlag(FLAGS_master_port);
  rendezvous.local_hostname = absl::GetFlag(FLAGS_current_host);
  rendezvous.timeout = absl::GetFlag(FLAGS_connect_timeout);

  RETURN_IF_ERROR(ParseTrainerChoices(options));
  OptimizerOptions& optimizer = options.optimizer;
  optimizer.learning_rate = absl::GetFlag(FLAGS_lr);
  optimizer.momentum = absl::GetFlag(FLAGS_momentum);
  optimizer.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  optimizer.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);

  options.model = absl::GetFlag(FLAGS_model);
  options.steps = absl::GetFlag(FLAGS_steps);
  options.epochs = absl::GetFlag(FLAGS_epochs);
  options.device_step_ms = absl::GetFlag(FLAGS_device_step_ms);
  options.local_rank = absl::GetFlag(FLAGS_local_rank);
  options.bucket_bytes = static_cast<int64_t>(absl::GetFlag(FLAGS_bucket_mb) * (1 << 20));
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  options.resume = absl::GetFlag(FLAGS_resume);
  options.final_model_dir = absl::GetFlag(FLAGS_model_dir);
  // One metrics file per job: rank 0's.
  options.metrics_file = rendezvous.rank == 0 ? absl::GetFlag(FLAGS_metrics_file) : "";
  options.sample_log_dir = absl::GetFlag(FLAGS_sample_log_dir);
  // `train` gives the port to the leader rank alone.
  options.metrics_port = rendezvous.rank == 0 ? absl::GetFlag(FLAGS_metrics_port) : -1;
  return options;
}

}  // namespace heterodl
