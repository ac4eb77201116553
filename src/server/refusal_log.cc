#include "src/server/refusal_log.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace heterodl {
namespace {

absl::string_view What(RefusalKind kind) {
  switch (kind) {
    case RefusalKind::kUnauthenticated:
      return "refused a call from %s: missing or wrong auth token";
    case RefusalKind::kStreamLimit:
      return "refused a call from %s: the server's limit of streams open (--max-streams)";
    case RefusalKind::kHostStreamLimit:
      return "refused a call from %s: its host's share of streams open "
             "(--max-streams-per-host)";
    case RefusalKind::kUnreadStream:
      return "ended a stream of %s: it held its batches unread for longer than "
             "--unread-timeout while others waited for memory (--max-memory-mb)";
  }
  return "refused a call from %s";
}

}  // namespace

std::optional<std::string> RefusalLog::Refused(RefusalKind kind, absl::string_view peer,
                                               absl::Time now) {
  absl::MutexLock lock(&mu_);
  Tally& tally = tallies_[static_cast<int>(kind)];
  ++tally.total;
  ++tally.unsaid;
  if (now - tally.last_said < interval_) {
    return std::nullopt;
  }
  std::string line = absl::StrReplaceAll(What(kind), {{"%s", peer}});
  if (tally.unsaid > 1) {
    absl::StrAppend(&line, " (", tally.unsaid, " such refusals in the last ",
                    absl::FormatDuration(interval_), " or since the last line; ", tally.total,
                    " since start)");
  }
  tally.unsaid = 0;
  tally.last_said = now;
  return line;
}

uint64_t RefusalLog::count(RefusalKind kind) const {
  absl::MutexLock lock(&mu_);
  return tallies_[static_cast<int>(kind)].total;
}

}  // namespace heterodl
