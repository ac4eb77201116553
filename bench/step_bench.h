// `heterodl bench step`: the same training twice on this machine, the way the
// published SageMaker comparisons were made, and the planner checked against
// it.
//
//   homogeneous    the trainer and its decoding share the CPU budget of a GPU
//                  instance: a data server and the trainer pinned (taskset)
//                  to the same cores;
//   heterogeneous  the same trainer on those cores, fed by data servers pinned
//                  to the other cores (1, 2, ... servers, one core each).
//
// What stands for the accelerator is a real LibTorch CPU step of the model on
// the trainer's cores (default), or, with device_step_ms, a modelled one: the
// trainer waits that long per step instead of running the model, as a GPU
// would keep it waiting while its CPU is free. The runs are priced as a GPU
// instance type (homogeneous) plus one data instance type per data server,
// from the price table. The planner's prediction for each configuration uses
// the per-core decode rate and the device step time measured here first.
//
//   StepBenchOptions options;
//   options.heterodl = "/path/to/heterodl";
//   options.dataset = "data/sample";
//   ASSIGN_OR_RETURN(std::string report, RunStepBench(options));
#ifndef HETERODL_BENCH_STEP_BENCH_H_
#define HETERODL_BENCH_STEP_BENCH_H_

#include <string>

#include "absl/status/statusor.h"

namespace heterodl {

struct StepBenchOptions {
  std::string heterodl;  // the binary: its serve and train commands are run
  std::string dataset;
  std::string model = "small_cnn";
  int batch_size = 64;
  std::string pipeline = "random_resized_crop(112)|hflip(0.5)";
  int steps = 40;             // per run
  int warmup_steps = 8;       // left out of the averages
  double device_step_ms = 0;  // 0: a real LibTorch CPU step
  std::string prices;         // price table CSV
  std::string gpu_instance = "ml.p3.2xlarge";
  std::string data_instance = "ml.c5.9xlarge";
  int max_data_servers = 0;  // 0: one per core not used by the trainer
  std::string report_dir;    // report.md + plot; empty: none
  bool json = false;
};

absl::StatusOr<std::string> RunStepBench(const StepBenchOptions& options);

}  // namespace heterodl

#endif  // HETERODL_BENCH_STEP_BENCH_H_
