// The dnn group's training process: one rank of a data-parallel job, fed by
// the RemoteLoader, gradients averaged across ranks each step.
//
//   TrainerOptions options;
//   options.data.servers.fixed = {"127.0.0.1:50051"};
//   options.rendezvous.rank = 0;
//   options.rendezvous.world_size = 2;
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
#include "src/client/remote_loader.h"
#include "src/train/lr_schedule.h"
#include "src/train/rendezvous_options.h"
#include "src/train/train_choices.h"

namespace heterodl {

// The optimizer and its learning rate over the run.
struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kSgd;  // SGD with momentum (Nesterov off), or AdamW
  double learning_rate = 0.05;
  double momentum = 0.9;  // sgd
  double weight_decay = 1e-4;
  int64_t warmup_steps = 0;
  LrSchedule::Kind schedule = LrSchedule::Kind::kCosine;
};

struct TrainerOptions {
  // This rank's data: the servers, batch size, seed, pipeline, token, TLS,
  // pixel channels, connect timeout. Its rank and world_size are the
  // rendezvous's (the trainer sets them), its pinned pixel memory the
  // device's.
  RemoteLoaderOptions data;
  // How the ranks meet. use_nccl follows the device (the trainer sets it).
  RendezvousOptions rendezvous;
  OptimizerOptions optimizer;

  std::string model = "small_cnn";
  // Stop after this many steps; 0 runs `epochs` whole epochs.
  int64_t steps = 0;
  int epochs = 1;

  // > 0: the accelerator is modelled, not run: each step waits this long
  // instead of running the model (bench step on machines without a GPU).
  double device_step_ms = 0;
  DeviceKind device = DeviceKind::kAuto;
  // This rank's index on its host: its GPU.
  int local_rank = 0;
  Precision precision = Precision::kAuto;
  // How the model's convolution weights and its input lie in memory
  // (models.h, ToChannelsLast).
  MemoryFormat memory_format = MemoryFormat::kAuto;
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

  std::string metrics_file;  // JSON lines, one per step; empty: none
  // >= 0 (rank 0): Prometheus metrics of the data feed at
  // http://0.0.0.0:metrics_port/metrics (0: any free port, logged).
  int metrics_port = -1;
  // When set, each rank writes DIR/rank<R>.samples: "epoch batch index" per
  // sample it trained on (for exactly-once checks).
  std::string sample_log_dir;
  // Set from a signal handler thread: every rank stops after the same step,
  // at most 8 steps on (the host checks it when it waits for the device).
  // Before training began, it ends the wait for data servers.
  const std::atomic<bool>* stop_requested = nullptr;
  // Set once the rank has joined the others and training begins: until
  // then a stop may find it waiting in the rendezvous for a peer that
  // stopped first, which no flag interrupts (heterodl-trainer ends such a
  // rank itself).
  std::atomic<bool>* training_began = nullptr;
};

// Runs one rank to the end. OK when training completed (or was stopped by
// stop_requested); otherwise the first error, naming what failed.
absl::Status RunTrainerRank(const TrainerOptions& options);

}  // namespace heterodl

#endif  // HETERODL_SRC_TRAIN_TRAINER_H_
