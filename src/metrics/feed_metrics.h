// FeedMetrics: the data feed as one training rank sees it, for the Prometheus
// endpoint of the trainer's leader (`train --metrics-port`) and of a Python
// RemoteDataLoader (`metrics_port=`): its steps, how long each took and how
// much of it was spent waiting for the batch, the samples its batches held,
// and from those and the data group's capacity the data hosts that would keep
// the stall at kSizingStall (docs/operations.md, "Monitoring").
//
//   FeedMetrics feed("train", world_size);
//   feed.RecordStep({.step_seconds = 0.21, .data_wait_seconds = 0.01,
//                    .samples = 256, .failed_samples = 0});
//   std::string text = feed.Render(watch.capacity(), HETERODL_VERSION);
//
// A step is what a training loop does between taking one batch and taking
// the next: its time includes the wait for that next batch. Thread-safe:
// steps are recorded on the training thread, rendered on a scrape's.
//
// Free of protobuf, as the trainer's LibTorch translation units include it.
#ifndef HETERODL_SRC_METRICS_FEED_METRICS_H_
#define HETERODL_SRC_METRICS_FEED_METRICS_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "src/client/data_group_capacity.h"
#include "src/metrics/prometheus_text.h"

namespace heterodl {

// The data stall the data group is sized for (heterodl_data_hosts_needed,
// and the metrics file's data_hosts_needed).
inline constexpr double kSizingStall = 0.05;

// The most recent steps spanning this many seconds make the "recent"
// gauges (stall ratio, hosts needed): long enough to smooth a slow batch,
// short enough for an autoscaler to follow a change within a minute.
inline constexpr double kRecentSeconds = 30;

struct FeedStep {
  double step_seconds = 0;
  double data_wait_seconds = 0;  // of step_seconds
  uint32_t samples = 0;          // in this rank's batch
  uint32_t failed_samples = 0;   // of them: slots whose own sample failed
};

// The data hosts, each building `capacity_per_host` samples/s, that keep the
// stall at `max_stall` when all ranks together took `samples` over steps
// that computed (did not wait for data) for `compute_seconds`: nullopt when
// any of the three is not positive.
std::optional<int> DataHostsForStall(double samples, double compute_seconds,
                                     double capacity_per_host, double max_stall);

class FeedMetrics {
 public:
  // `role`: the build info's role label ("train", "loader"). `world_size`:
  // the ranks that take as many samples per step as this one.
  FeedMetrics(std::string role, int world_size);

  void RecordStep(const FeedStep& step) ABSL_LOCKS_EXCLUDED(mu_);

  // The text exposition: heterodl_steps_total,
  // heterodl_delivered_samples_total{status="ok"|"failed"},
  // heterodl_step_seconds and heterodl_data_wait_seconds histograms,
  // heterodl_data_stall_ratio (the recent steps'), heterodl_world_size, and
  // with `data_group` known heterodl_data_hosts,
  // heterodl_data_capacity_per_host_samples_per_second and
  // heterodl_data_hosts_needed; heterodl_build_info{version, role}.
  std::string Render(const std::optional<DataGroupCapacity>& data_group,
                     const std::string& version) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const std::string role_;
  const int world_size_;
  mutable absl::Mutex mu_;
  uint64_t steps_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t samples_ok_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t samples_failed_ ABSL_GUARDED_BY(mu_) = 0;
  MetricHistogram step_seconds_ ABSL_GUARDED_BY(mu_);
  MetricHistogram data_wait_seconds_ ABSL_GUARDED_BY(mu_);
  // The fewest newest steps that span kRecentSeconds (all of them until
  // they do), and the seconds they span.
  std::deque<FeedStep> recent_ ABSL_GUARDED_BY(mu_);
  double recent_seconds_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_METRICS_FEED_METRICS_H_
