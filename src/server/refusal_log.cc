#include "src/server/refusal_log.h"

#include "absl/strings/str_cat.h"

namespace heterodl {
namespace {

absl::string_view What(RefusalKind kind) {
  switch (kind) {
    case RefusalKind::kUnauthenticated:
      return "missing or wrong auth token";
    case RefusalKind::kStreamLimit:
      return "the server's limit of streams open (--max-streams)";
  }
  return "refused";
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
  std::string line = absl::StrCat("refused a call from ", peer, ": ", What(kind));
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
