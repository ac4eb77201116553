#include "src/server/recent_rate.h"

#include <algorithm>

namespace heterodl {

void RecentRate::Note(uint64_t count, absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (!points_.empty() && now - points_.back().first < window_ / 10) {
    return;
  }
  points_.emplace_back(now, count);
  // One point older than the window stays: the rate's starting point.
  while (points_.size() > 2 && now - points_[1].first >= window_) {
    points_.pop_front();
  }
}

double RecentRate::PerSecond(uint64_t count, absl::Time now) {
  absl::MutexLock lock(&mu_);
  while (points_.size() > 1 && now - points_[1].first >= window_) {
    points_.pop_front();
  }
  if (points_.empty()) {
    return 0;
  }
  const auto& [since, then] = points_.front();
  // A lone point younger than the window: the rate since it, over at least a
  // second so that one early batch does not read as a burst.
  const double seconds = std::max(absl::ToDoubleSeconds(now - since), 1.0);
  return count >= then ? static_cast<double>(count - then) / seconds : 0;
}

}  // namespace heterodl
