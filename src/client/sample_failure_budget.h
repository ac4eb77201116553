// SampleFailureBudget: what a loader does about the samples its servers
// could not make. A server never fails a batch for a bad sample: it fills the
// slot with a deterministic replacement (or, when those fail too, leaves it
// unfilled) and says so in the batch. That keeps one corrupt JPEG from
// stopping a week-long run, and it would let a run whose every file is
// missing train on replacements and black images without a word. So the
// loader counts them per epoch, says so in its log as they arrive (rate
// limited, with the server's reasons), and fails once more than
// `max_failed_fraction` of this rank's samples of an epoch have failed.
//
//   SampleFailureBudget budget({.max_failed_fraction = 0.05,
//                               .samples_per_epoch = 4096, .dataset = "/data/train"});
//   budget.StartEpoch(epoch);
//   SampleFailureBudget::Verdict verdict = budget.Note(batch, absl::Now());
//   if (verdict.log_line) LogWarning("%s", *verdict.log_line);
//   if (!verdict.over.ok()) return verdict.over;  // DATA_LOSS naming the dataset
//
// Free of I/O and clocks of its own; not thread-safe (the loader keeps it
// under its lock).
#ifndef HETERODL_SRC_CLIENT_SAMPLE_FAILURE_BUDGET_H_
#define HETERODL_SRC_CLIENT_SAMPLE_FAILURE_BUDGET_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "src/client/batch.h"

namespace heterodl {

struct SampleFailureOptions {
  // More failed samples than this share of an epoch's (for this rank) is an
  // error; 1 never is, 0 is at the first.
  double max_failed_fraction = 0.05;
  // This rank's samples per epoch.
  int64_t samples_per_epoch = 0;
  // Where the servers read the dataset, for messages.
  std::string dataset;
  // After the first line, at most one line per this long.
  absl::Duration log_every = absl::Seconds(10);
};

class SampleFailureBudget {
 public:
  // Reasons quoted in one log line.
  static constexpr int kReasonsQuoted = 2;

  explicit SampleFailureBudget(SampleFailureOptions options);

  // The trainer moved to `epoch` (from its start or a resume point): its
  // count starts at zero.
  void StartEpoch(uint32_t epoch);

  struct Verdict {
    // What to log now, if anything.
    std::optional<std::string> log_line;
    // DATA_LOSS once the epoch's failures pass the budget (and from then on).
    absl::Status over;
  };
  // Notes a batch handed to the trainer.
  Verdict Note(const Batch& batch, absl::Time now);

  int64_t failed_this_epoch() const { return failed_this_epoch_; }
  // Failures the budget allows per epoch: floor(fraction x samples).
  int64_t allowed_per_epoch() const { return allowed_; }

 private:
  // The line about the failures seen since the last one.
  std::string Describe(uint32_t epoch) const;

  const SampleFailureOptions options_;
  const int64_t allowed_;
  uint32_t epoch_ = 0;
  int64_t failed_this_epoch_ = 0;
  int64_t unfilled_this_epoch_ = 0;
  // Since the last log line: failed samples, and the first reasons given.
  int64_t failed_unsaid_ = 0;
  int64_t unfilled_unsaid_ = 0;
  std::vector<std::string> reasons_unsaid_;
  absl::Time last_line_ = absl::InfinitePast();
  absl::Status over_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_CLIENT_SAMPLE_FAILURE_BUDGET_H_
