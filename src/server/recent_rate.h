// The rate of a growing count over the last few seconds, not since start:
// what `heterodl status` shows as a server's images/s now (a server idle
// for an hour and then busy has a lifetime average that says nothing).
//
//   RecentRate rate(absl::Seconds(10));
//   rate.Note(samples_built, absl::Now());  // whenever the count grows
//   double per_second = rate.PerSecond(samples_built, absl::Now());
#ifndef HETERODL_SRC_SERVER_RECENT_RATE_H_
#define HETERODL_SRC_SERVER_RECENT_RATE_H_

#include <cstdint>
#include <deque>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace heterodl {

class RecentRate {
 public:
  // The rate is measured over about `window`.
  explicit RecentRate(absl::Duration window) : window_(window) {}

  // Records that the count was `count` at `now` (kept at most once per
  // tenth of the window; cheap to call for every batch).
  void Note(uint64_t count, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

  // (count - the count about one window ago) / the time between, with
  // `count` at `now`; 0 before anything was noted. Past the window with no
  // note, the count has not grown: the rate falls to 0.
  double PerSecond(uint64_t count, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const absl::Duration window_;
  absl::Mutex mu_;
  std::deque<std::pair<absl::Time, uint64_t>> points_ ABSL_GUARDED_BY(mu_);
};

}  // namespace heterodl

#endif  // HETERODL_SRC_SERVER_RECENT_RATE_H_
