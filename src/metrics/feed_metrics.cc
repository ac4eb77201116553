#include "src/metrics/feed_metrics.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "src/sizing/cluster_sizing.h"

namespace heterodl {
namespace {

// From a batch that is already there (a copy) to one that a slow data group
// holds back for seconds.
std::vector<double> DataWaitBounds() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

// From a small model on an H100 to a large one on an old GPU.
std::vector<double> StepBounds() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
}

double Number(uint64_t value) { return static_cast<double>(value); }

}  // namespace

std::optional<int> DataHostsForStall(double samples, double compute_seconds,
                                     double capacity_per_host, double max_stall) {
  if (samples <= 0 || compute_seconds <= 0 || capacity_per_host <= 0) {
    return std::nullopt;
  }
  // What the ranks would take if every batch were there when asked for.
  const double demand = samples / compute_seconds;
  const absl::StatusOr<int> needed = DataHostsNeeded(demand, capacity_per_host, max_stall);
  return needed.ok() ? std::optional<int>(*needed) : std::nullopt;
}

FeedMetrics::FeedMetrics(std::string role, int world_size)
    : role_(std::move(role)),
      world_size_(world_size),
      step_seconds_(StepBounds()),
      data_wait_seconds_(DataWaitBounds()) {}

void FeedMetrics::RecordStep(const FeedStep& step) {
  absl::MutexLock lock(&mu_);
  ++steps_;
  samples_failed_ += step.failed_samples;
  samples_ok_ += step.samples - std::min(step.failed_samples, step.samples);
  step_seconds_.Observe(step.step_seconds);
  data_wait_seconds_.Observe(step.data_wait_seconds);
  recent_.push_back(step);
  recent_seconds_ += step.step_seconds;
  while (recent_.size() > 1 && recent_seconds_ - recent_.front().step_seconds >= kRecentSeconds) {
    recent_seconds_ -= recent_.front().step_seconds;
    recent_.pop_front();
  }
}

std::string FeedMetrics::Render(const std::optional<DataGroupCapacity>& data_group,
                                const std::string& version) const {
  absl::MutexLock lock(&mu_);
  PrometheusText text;
  text.Gauge("heterodl_build_info", "The heterodl version of this process, and its role.",
             {{{{"version", version}, {"role", role_}}, 1}});
  text.Counter("heterodl_steps_total", "Training steps this rank took.", {{{}, Number(steps_)}});
  text.Counter("heterodl_delivered_samples_total",
               "Samples in the batches this rank trained on, by outcome: ok, failed (the sample "
               "could not be built; its slot holds a deterministic other sample or zeros).",
               {{{{"status", "ok"}}, Number(samples_ok_)},
                {{{"status", "failed"}}, Number(samples_failed_)}});
  text.Histogram("heterodl_step_seconds",
                 "Seconds from taking one batch to taking the next, the wait for it included.",
                 step_seconds_);
  text.Histogram("heterodl_data_wait_seconds",
                 "Seconds each step waited for its batch (0 when it was already there).",
                 data_wait_seconds_);
  double step_seconds = 0;
  double wait_seconds = 0;
  double samples = 0;
  for (const FeedStep& step : recent_) {
    step_seconds += step.step_seconds;
    wait_seconds += step.data_wait_seconds;
    samples += step.samples;
  }
  if (step_seconds > 0) {
    text.Gauge("heterodl_data_stall_ratio",
               "The share of the recent steps' time (about the last 30 s) spent waiting for data.",
               {{{}, wait_seconds / step_seconds}});
  }
  text.Gauge("heterodl_world_size", "Ranks in the job, each taking a batch per step.",
             {{{}, static_cast<double>(world_size_)}});
  if (!data_group || data_group->hosts <= 0) {
    return std::move(text).Take();
  }
  text.Gauge("heterodl_data_hosts", "Data servers that have built batches, as last polled.",
             {{{}, static_cast<double>(data_group->hosts)}});
  text.Gauge("heterodl_data_capacity_per_host_samples_per_second",
             "The data servers' mean capacity: samples per second each builds never idle.",
             {{{}, data_group->per_host}});
  const std::optional<int> needed = DataHostsForStall(
      samples * world_size_, step_seconds - wait_seconds, data_group->per_host, kSizingStall);
  if (needed) {
    text.Gauge("heterodl_data_hosts_needed",
               "Data servers that would hold the data stall at 5% at the recent steps' demand "
               "(what an autoscaler scales the data group to).",
               {{{}, static_cast<double>(*needed)}});
  }
  return std::move(text).Take();
}

}  // namespace heterodl
