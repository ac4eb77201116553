#include "src/client/server_health_log.h"

#include "absl/strings/str_cat.h"

namespace heterodl {

std::optional<HealthLine> ServerHealthLog::StreamFailed(const std::string& address,
                                                        const StreamFailure& failure,
                                                        absl::Time now) {
  Health& health = health_[address];
  const std::string reason = failure.status.ToString();
  std::optional<HealthLine> line;
  if (failure.left) {
    // Every connection of a leaving server ends its stream together: once.
    if (now - health.left_at > absl::Seconds(1)) {
      line = HealthLine{
          false, absl::StrCat("data server ", address, " is leaving (", failure.status.message(),
                              failure.others > 0
                                  ? "); its batches go to the others"
                                  : "); no other server is listed: training waits for one")};
      health.left_at = now;
      health.last_logged = now;
    }
  } else if (now - health.left_at < absl::Minutes(1)) {
    // Gone as it said: not a failure yet.
  } else if (reason != health.last_error || now - health.last_logged > absl::Minutes(1)) {
    line = HealthLine{
        true, absl::StrCat("data server ", address, ": ", reason, "; retrying (every ",
                           absl::FormatDuration(failure.retry_every), " at most)",
                           failure.others > 0 ? " while others take its batches"
                                              : "; no other server is listed: training waits")};
    health.last_logged = now;
  }
  health.last_error = reason;
  return line;
}

std::optional<HealthLine> ServerHealthLog::Delivering(const std::string& address) {
  const auto it = health_.find(address);
  if (it == health_.end()) {
    return std::nullopt;
  }
  it->second.left_at = absl::InfinitePast();
  if (it->second.last_error.empty()) {
    return std::nullopt;
  }
  it->second.last_error.clear();
  return HealthLine{false, absl::StrCat("data server ", address, ": delivering again")};
}

std::string ServerHealthLog::Describe(const std::string& address) const {
  const auto it = health_.find(address);
  if (it == health_.end() || it->second.last_error.empty()) {
    return "connected, not sending";
  }
  return it->second.last_error;
}

}  // namespace heterodl
