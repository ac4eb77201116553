// The dnn group's training process: one rank of a data-parallel job, fed by
// the RemoteLoader, gradients averaged across ranks each step.
//
//   TrainerOptions options;
//   options.data_servers = {"127.0.0.1:50051"};
//   options.rank = 0;
//   options.world_size = 2;
//   absl::Status result = RunTrainerRank(options);
//
// This header is free of LibTorch so the launcher compiles without it.
#ifndef HETERODL_SRC_TRAIN_TRAINER_H_
#define HETERODL_SRC_TRAIN_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "src/common/net/tls_config.h"

namespace heterodl {

struct TrainerOptions {
  std::vector<std::string> data_servers;  // host:port
  // Where more are found while training runs (RemoteLoaderOptions).
  std::string data_servers_file;
  std::string data_servers_dns;
  std::string model = "small_cnn";
  // Stop after this many steps; 0 runs `epochs` whole epochs.
  int64_t steps = 0;
  int epochs = 1;
  uint32_t batch_size = 32;
  uint64_t seed = 0;
  std::string pipeline;  // empty: the servers' default

  // Optimization. "sgd" (with momentum, Nesterov off) or "adamw".
  std::string optimizer = "sgd";
  double learning_rate = 0.05;
  double momentum = 0.9;  // sgd
  double weight_decay = 1e-4;
  int64_t warmup_steps = 0;
  std::string lr_schedule = "cosine";  // or "constant"

  // > 0: the accelerator is modelled, not run: each step waits this long
  // instead of running the model (bench step on machines without a GPU).
  double device_step_ms = 0;
  // "auto" (CUDA when present), "cpu" or "cuda".
  std::string device = "auto";
  // This rank's index on its host: its GPU.
  int local_rank = 0;
  // "auto" (bf16 autocast on CUDA, fp32 on CPU), "fp32" or "bf16".
  std::string precision = "auto";
  // "contiguous" (NCHW) or "channels_last": how the model's convolution
  // weights and its input lie in memory (models.h, ToChannelsLast).
  std::string memory_format = "contiguous";
  // Gradient all-reduce bucket size.
  int64_t bucket_bytes = 25 << 20;

  // Checkpoints: every `checkpoint_every` steps (0: never on a schedule) and
  // when stopped by a signal, to checkpoint_dir/checkpoint.pt. With `resume`,
  // training continues from that file when it exists.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  bool resume = false;
  // Where the final weights go (a checkpoint-format file); empty: nowhere.
  std::string final_model_dir;

  uint32_t rank = 0;
  uint32_t world_size = 1;
  // Rendezvous: the c10d TCPStore runs in rank 0 at master_addr:master_port.
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Address other ranks reach this rank's Gloo transport at; empty: this
  // host's name.
  std::string gloo_hostname;
  absl::Duration connect_timeout = absl::Seconds(60);
  std::string auth_token;  // the data servers' shared token, if they need one
  TlsConfig tls;           // TLS to the data servers
  // Pixels on the servers' pixel channels when offered (RemoteLoaderOptions).
  bool pixel_channel = true;

  std::string metrics_file;  // JSON lines, one per step; empty: none
  // When set, each rank writes DIR/rank<R>.samples: "epoch batch index" per
  // sample it trained on (for exactly-once checks).
  std::string sample_log_dir;
  // Set from a signal handler thread: every rank stops after the same step,
  // at most 8 steps on (the host checks it when it waits for the device).
  // Before training began, it ends the wait for data servers.
  const std::atomic<bool>* stop_requested = nullptr;
};

// Runs one rank to the end. OK when training completed (or was stopped by
// stop_requested); otherwise the first error, naming what failed.
absl::Status RunTrainerRank(const TrainerOptions& options);

}  // namespace heterodl

#endif  // HETERODL_SRC_TRAIN_TRAINER_H_
