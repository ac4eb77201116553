#include "src/client/sample_failure_budget.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace heterodl {
namespace {

// Of a server's reason, what a log line quotes.
constexpr size_t kMaxReasonBytes = 300;

std::string Quoted(const std::string& reason) {
  if (reason.size() <= kMaxReasonBytes) {
    return reason;
  }
  return absl::StrCat(reason.substr(0, kMaxReasonBytes), "...");
}

}  // namespace

SampleFailureBudget::SampleFailureBudget(SampleFailureOptions options)
    : options_(std::move(options)),
      allowed_(static_cast<int64_t>(
          std::floor(std::clamp(options_.max_failed_fraction, 0.0, 1.0) *
                     static_cast<double>(std::max<int64_t>(options_.samples_per_epoch, 0))))) {}

void SampleFailureBudget::StartEpoch(uint32_t epoch) {
  if (!over_.ok()) {
    return;  // the run is over; a new epoch does not make it good
  }
  epoch_ = epoch;
  failed_this_epoch_ = 0;
  unfilled_this_epoch_ = 0;
}

SampleFailureBudget::Verdict SampleFailureBudget::Note(const Batch& batch, absl::Time now) {
  Verdict verdict;
  if (!over_.ok() || batch.failed == 0) {
    verdict.over = over_;
    return verdict;
  }
  if (batch.epoch != epoch_) {
    StartEpoch(batch.epoch);
  }
  int64_t unfilled = 0;
  for (const SlotStatus status : batch.status) {
    unfilled += status == SlotStatus::kUnfilled ? 1 : 0;
  }
  failed_this_epoch_ += batch.failed;
  unfilled_this_epoch_ += unfilled;
  failed_unsaid_ += batch.failed;
  unfilled_unsaid_ += unfilled;
  for (const std::string& reason : batch.failures) {
    if (static_cast<int>(reasons_unsaid_.size()) >= kReasonsQuoted) {
      break;
    }
    if (std::find(reasons_unsaid_.begin(), reasons_unsaid_.end(), reason) ==
        reasons_unsaid_.end()) {
      reasons_unsaid_.push_back(reason);
    }
  }
  if (failed_this_epoch_ > allowed_) {
    const double percent = 100.0 * std::clamp(options_.max_failed_fraction, 0.0, 1.0);
    std::vector<std::string> quoted;
    for (const std::string& reason : reasons_unsaid_) {
      quoted.push_back(Quoted(reason));
    }
    over_ = absl::DataLossError(
        absl::StrCat(failed_this_epoch_, " of this rank's ", options_.samples_per_epoch,
                     " samples of epoch ", batch.epoch,
                     " could not be read or decoded by the data servers, "
                     "more than max_failed_fraction allows (",
                     percent, "%, ", allowed_, allowed_ == 1 ? " sample" : " samples",
                     "): dataset ", options_.dataset.empty() ? "(unnamed)" : options_.dataset,
                     quoted.empty() ? "" : absl::StrCat("; e.g. ", absl::StrJoin(quoted, "; ")),
                     ". Check the dataset on the data hosts, or raise max_failed_fraction "
                     "(train --max-failed-fraction) to train on the replacements"));
    verdict.over = over_;
    return verdict;
  }
  if (now - last_line_ >= options_.log_every) {
    verdict.log_line = Describe(batch.epoch);
    last_line_ = now;
    failed_unsaid_ = 0;
    unfilled_unsaid_ = 0;
    reasons_unsaid_.clear();
  }
  return verdict;
}

std::string SampleFailureBudget::Describe(uint32_t epoch) const {
  std::vector<std::string> quoted;
  for (const std::string& reason : reasons_unsaid_) {
    quoted.push_back(Quoted(reason));
  }
  const int64_t replaced = failed_unsaid_ - unfilled_unsaid_;
  std::string fate = absl::StrCat(replaced, " replaced by other samples");
  if (unfilled_unsaid_ > 0) {
    absl::StrAppend(&fate, ", ", unfilled_unsaid_,
                    " left unfilled (zeros, label -100: a loss's ignore_index)");
  }
  return absl::StrCat(failed_unsaid_, failed_unsaid_ == 1 ? " sample" : " samples", " of epoch ",
                      epoch, " could not be read or decoded (", fate, "; ", failed_this_epoch_,
                      " this epoch, ", allowed_, " allowed of ", options_.samples_per_epoch, ")",
                      quoted.empty() ? "" : absl::StrCat(": ", absl::StrJoin(quoted, "; ")));
}

}  // namespace heterodl
