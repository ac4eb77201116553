// Step metrics of a training run: a JSON line per step (--metrics-file) and
// an end-of-run summary with the data stall share.
//
// Free of torch (and compiled without its include path, which ships its own
// protobuf headers), so it may use protobuf's JSON printer.
//
//   ASSIGN_OR_RETURN(auto writer, MetricsWriter::Open(path, rank));
//   writer->RecordStep(step);
//   std::string summary = writer->WriteSummary(all_ranks, world_size, seconds);
//
// A write that fails (a full disk) is logged once and ends the file's
// metrics; training goes on.
#ifndef HETERODL_SRC_TRAIN_METRICS_WRITER_H_
#define HETERODL_SRC_TRAIN_METRICS_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace heterodl {

// One optimizer step, as the progress line and the metrics file both show it
// (docs/operations.md, "Metrics").
struct StepRecord {
  uint64_t step = 0;  // from 1: the run's step count after this step

  uint32_t epoch = 0;
  double step_ms = 0;
  double data_wait_ms = 0;
  double loss = 0;
  uint32_t batch_size = 0;  // this rank's
  uint32_t failed_samples = 0;
  double learning_rate = 0;
  // All ranks: this rank's batch x world size / step_ms.
  double images_per_sec = 0;
  // The data group as the leader last measured it (DataGroupWatch); 0 hosts:
  // not known. The metrics line then carries the hosts needed for a data
  // stall of at most kSizingStall (feed_metrics.h) at this step's demand.
  double data_capacity_per_host = 0;
  int data_hosts = 0;
};

struct RunTotals {
  uint64_t steps = 0;
  uint64_t images = 0;  // this rank's
  double step_ms = 0;
  double data_wait_ms = 0;
  double last_loss = 0;  // the last step's
  uint64_t failed_samples = 0;
};

class MetricsWriter {
 public:
  // `path` may be empty (no file). Otherwise the file (and its directory) is
  // created, or appended to when `append` (a resumed run); errors name it.
  static absl::StatusOr<std::unique_ptr<MetricsWriter>> Open(const std::string& path, uint32_t rank,
                                                             bool append = false);
  ~MetricsWriter();

  void RecordStep(const StepRecord& record);
  const RunTotals& totals() const { return totals_; }

  // The summary of all ranks (totals summed by the caller across ranks) as a
  // JSON object, and appended to the metrics file.
  std::string WriteSummary(const RunTotals& all_ranks, uint32_t world_size, double wall_seconds);

 private:
  MetricsWriter(std::FILE* file, std::string path, uint32_t rank)
      : file_(file), path_(std::move(path)), rank_(rank) {}
  void WriteLine(const std::string& line);

  std::FILE* file_;
  const std::string path_;
  uint32_t rank_;
  RunTotals totals_;
  bool failed_ = false;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_TRAIN_METRICS_WRITER_H_
