// RefusalLog: the calls a data server refuses (a missing or wrong token, a
// stream over the limit), counted, and said at a bounded rate: the first of
// a kind at once, then at most one line per interval with how many came
// since. A client that retries a refused call in a loop (or a scanner)
// cannot fill the server's log: 20,000 refusals a second make one line.
//
//   if (std::optional<std::string> line = refusals.Refused(kind, peer, now)) LogWarning(...);
//   stats.set_calls_refused_unauthenticated(refusals.count(RefusalKind::kUnauthenticated));
//
// Thread-safe.
#ifndef HETERODL_SRC_SERVER_REFUSAL_LOG_H_
#define HETERODL_SRC_SERVER_REFUSAL_LOG_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace heterodl {

enum class RefusalKind {
  kUnauthenticated,  // a call without the server's token, or a wrong one
  kStreamLimit,      // a stream over --max-streams
  kHostStreamLimit,  // a stream over --max-streams-per-host
  kUnreadStream,     // a stream ended for holding its batches unread
};
inline constexpr int kRefusalKinds = 4;

class RefusalLog {
 public:
  explicit RefusalLog(absl::Duration interval = absl::Seconds(10)) : interval_(interval) {}

  // A call from `peer` was refused; the line to log, if one is due.
  std::optional<std::string> Refused(RefusalKind kind, absl::string_view peer, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Refusals of `kind` since start.
  uint64_t count(RefusalKind kind) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Tally {
    uint64_t total = 0;
    uint64_t unsaid = 0;  // since the last line
    absl::Time last_said = absl::InfinitePast();
  };

  const absl::Duration interval_;
  mutable absl::Mutex mu_;
  std::array<Tally, kRefusalKinds> tallies_ ABSL_GUARDED_BY(mu_);
};

}  // namespace heterodl

#endif  // HETERODL_SRC_SERVER_REFUSAL_LOG_H_
