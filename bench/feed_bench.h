// `heterodl bench feed`: the pipe in front of the accelerator, measured as a
// trainer sees it.
//
// Starts `heterodl serve` on the dataset, drives a RemoteLoader like a
// trainer (optionally with a modelled accelerator step between batches) over
// several epochs, and reports in one run: the images per second delivered,
// the same threads' decode + augment rate in memory (`bench augment`'s
// engine), their ratio (the pipeline efficiency), the wait at epoch
// boundaries against the other steps', the same with one-batch epochs, and
// with the loader's prefetch across epochs turned off (the bubble it
// removes). With `peers`, the system-level peers run on the same files and
// cores: heterodl's Python loader, PyTorch's DataLoader (PIL and
// torchvision.io) and a tf.data service on loopback (bench/peers/).
//
//   FeedBenchOptions options;
//   options.heterodl = "build/heterodl";
//   options.dataset = "data/sample";
//   ASSIGN_OR_RETURN(std::string report, RunFeedBench(options));
#ifndef HETERODL_BENCH_FEED_BENCH_H_
#define HETERODL_BENCH_FEED_BENCH_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/data/dataset.h"

namespace heterodl {

struct FeedBenchOptions {
  std::string heterodl;  // this executable, to start the server
  std::string dataset;
  // How the dataset is read here (an s3:// one's endpoint and credentials),
  // and the same as `serve` flags for its server.
  DatasetLimits files;
  std::vector<std::string> serve_flags;
  std::string pipeline;  // empty: the default
  int threads = 0;       // the server's (0: one per core)
  int worker_nice = 10;  // the server's decode threads' (serve --worker-nice)
  int batch_size = 256;
  // The loader's block shuffle (RemoteLoaderOptions); 0: the default plan.
  uint32_t shuffle_block_shards = 0;
  // > 0: the modelled accelerator's step between two batches.
  double device_step_ms = 0;
  // Each loader run lasts at least this long, and at least 3 epochs.
  double seconds = 4;
  // Rounds of the runs; each figure is the median over rounds.
  int rounds = 5;
  bool peers = false;
  // For the peers: the project's Python (torch, torchvision, the heterodl
  // module on `python_path`), the one with TensorFlow, and bench/peers/.
  std::string python;
  std::string python_path;
  std::string tensorflow_python;
  std::string peers_dir;
  bool json = false;
};

absl::StatusOr<std::string> RunFeedBench(const FeedBenchOptions& options);

}  // namespace heterodl

#endif  // HETERODL_BENCH_FEED_BENCH_H_
