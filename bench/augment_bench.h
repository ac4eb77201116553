// `heterodl bench augment`: decode + augment throughput per core, against the
// torchvision + PIL peer and plain OpenCV decoding, measured side by side in
// one run, plus thread scaling.
//
//   AugmentBenchOptions options;
//   options.dataset = "data/sample";
//   ASSIGN_OR_RETURN(std::string report, RunAugmentBench(options));
#ifndef HETERODL_BENCH_AUGMENT_BENCH_H_
#define HETERODL_BENCH_AUGMENT_BENCH_H_

#include <string>

#include "absl/status/statusor.h"
#include "src/data/dataset.h"

namespace heterodl {

struct AugmentBenchOptions {
  std::string dataset;
  std::string pipeline;  // empty: the default pipeline
  int max_files = 512;
  int threads = 0;       // thread scaling up to this many (0: all cores)
  double seconds = 3.0;  // per measurement
  int rounds = 3;        // heterodl and peer runs alternate this many times
  bool peer = true;
  std::string python;  // interpreter with torchvision
  // Interpreter whose PIL is Pillow-SIMD (bench/peers/setup_pillow_simd.sh):
  // the PIL peer runs on it too when it exists, a note says when it does
  // not; empty: no such peer.
  std::string pillow_simd_python;
  std::string peer_script;  // bench/peers/torchvision_augment.py
  bool json = false;
};

// Runs the benchmark; returns the report (a table, or one JSON object).
absl::StatusOr<std::string> RunAugmentBench(const AugmentBenchOptions& options);

// Decode + augment images per second of `threads` threads, each pinned to its
// own core, cycling for `seconds` over `max_files` files spread evenly over
// `dataset`, held in memory: the rate of the engine alone, with no queue,
// wire or loader around it (what `bench feed` compares delivery with).
// `pipeline` empty: the default. `files`: how the dataset is read (an
// s3:// one's endpoint).
absl::StatusOr<double> MeasureEngineRate(const std::string& dataset, const DatasetLimits& files,
                                         const std::string& pipeline, int threads, double seconds,
                                         int max_files = 1024);

}  // namespace heterodl

#endif  // HETERODL_BENCH_AUGMENT_BENCH_H_
