#include "src/server/memory_budget.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/process/process_stats.h"

namespace heterodl {

MemoryBudget::Grant& MemoryBudget::Grant::operator=(Grant&& other) noexcept {
  if (this != &other) {
    Reset();
    budget_ = std::move(other.budget_);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void MemoryBudget::Grant::Reset() {
  if (budget_ != nullptr) {
    std::exchange(budget_, nullptr)->Release(std::exchange(bytes_, 0));
  }
}

std::shared_ptr<MemoryBudget> MemoryBudget::Create(uint64_t capacity,
                                                   std::function<absl::Time()> clock) {
  return std::shared_ptr<MemoryBudget>(new MemoryBudget(capacity, std::move(clock)));
}

absl::Status MemoryBudget::Fits(uint64_t bytes) const {
  if (bytes <= capacity_) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("a batch of ", bytes >> 20, " MiB is over this server's memory budget of ",
                   capacity_ >> 20, " MiB for all streams (serve --max-memory-mb)"));
}

void MemoryBudget::Reserve(uint64_t bytes, const void* key, Ready ready) {
  {
    absl::MutexLock lock(&mu_);
    if (closed_) {
      bytes = 0;
    } else if (bytes > 0 && (!waiters_.empty() || reserved_ + bytes > capacity_)) {
      // Behind earlier waiters even when it would fit: first come, first
      // served (what needs nothing waits for nothing).
      waiters_.push_back({bytes, key, std::move(ready), clock_()});
      ++waited_;
      return;
    }
    reserved_ += bytes;
    peak_reserved_ = std::max(peak_reserved_, reserved_);
  }
  ready(bytes > 0 ? Grant(shared_from_this(), bytes) : Grant());
}

void MemoryBudget::CancelWaiting(const void* key) {
  CancelWhere([key](const Waiter& waiter) { return waiter.key == key; });
}

void MemoryBudget::Close() {
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }
  CancelWhere([](const Waiter&) { return true; });
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](MemoryBudget* budget)
           ABSL_EXCLUSIVE_LOCKS_REQUIRED(budget->mu_) { return budget->starting_ == 0; },
      this));
}

void MemoryBudget::CancelWhere(const std::function<bool(const Waiter&)>& cancel) {
  std::deque<Waiter> cancelled;
  std::deque<Waiter> started;
  {
    absl::MutexLock lock(&mu_);
    const auto picked = std::stable_partition(waiters_.begin(), waiters_.end(), cancel);
    std::move(waiters_.begin(), picked, std::back_inserter(cancelled));
    waiters_.erase(waiters_.begin(), picked);
    // The head may have been one of them, holding back smaller ones.
    started = TakeFittingLocked();
    starting_ += static_cast<int>(cancelled.size() + started.size());
  }
  Run(cancelled, started);
}

void MemoryBudget::Release(uint64_t bytes) {
  std::deque<Waiter> started;
  {
    absl::MutexLock lock(&mu_);
    reserved_ -= std::min(bytes, reserved_);
    started = TakeFittingLocked();
    starting_ += static_cast<int>(started.size());
  }
  Run({}, started);
}

void MemoryBudget::Run(const std::deque<Waiter>& cancelled, const std::deque<Waiter>& started) {
  for (const Waiter& waiter : cancelled) {
    waiter.ready(Grant());
  }
  for (const Waiter& waiter : started) {
    waiter.ready(Grant(shared_from_this(), waiter.bytes));
  }
  if (!cancelled.empty() || !started.empty()) {
    absl::MutexLock lock(&mu_);
    starting_ -= static_cast<int>(cancelled.size() + started.size());
  }
}

std::deque<MemoryBudget::Waiter> MemoryBudget::TakeFittingLocked() {
  std::deque<Waiter> fitting;
  if (closed_) {
    return fitting;  // all were cancelled
  }
  while (!waiters_.empty() && reserved_ + waiters_.front().bytes <= capacity_) {
    reserved_ += waiters_.front().bytes;
    fitting.push_back(std::move(waiters_.front()));
    waiters_.pop_front();
  }
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  return fitting;
}

MemoryBudget::Stats MemoryBudget::GetStats() const {
  absl::MutexLock lock(&mu_);
  Stats stats;
  stats.capacity = capacity_;
  stats.reserved = reserved_;
  stats.peak_reserved = peak_reserved_;
  stats.waiting = static_cast<int>(waiters_.size());
  stats.waited = waited_;
  stats.longest_wait = waiters_.empty() ? absl::ZeroDuration() : clock_() - waiters_.front().since;
  return stats;
}

uint64_t DefaultMemoryBudgetBytes() {
  const uint64_t usable = UsableMemoryBytes();
  // Nothing said how much there is: a budget that fits most machines.
  return usable == UINT64_MAX ? uint64_t{8} << 30 : usable / 2;
}

}  // namespace heterodl
