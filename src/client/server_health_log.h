// ServerHealthLog: what the loader says about each server's health. A
// failure is said when it first happens or changes, and once a minute while
// it lasts, not at every retry of every connection; a server that said it
// is leaving is said to leave, once, and failing to reach it in the minute
// after is expected, so not said.
//
//   if (std::optional<HealthLine> line = log.StreamFailed(address, end, now)) Log(*line);
//   ...
//   if (std::optional<HealthLine> line = log.Delivering(address)) Log(*line);
//
// Not thread-safe: the loader's lock guards it.
#ifndef HETERODL_SRC_CLIENT_SERVER_HEALTH_LOG_H_
#define HETERODL_SRC_CLIENT_SERVER_HEALTH_LOG_H_

#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"

namespace heterodl {

// A line to log: a warning or a note.
struct HealthLine {
  bool warning = false;
  std::string text;
};

// How a stream of a server ended, as far as the log is concerned.
struct StreamFailure {
  absl::Status status;
  // The server ended the stream because it is leaving (SIGTERM).
  bool left = false;
  // The longest the connection now waits before trying again.
  absl::Duration retry_every = absl::Seconds(5);
  // Other servers the loader uses now: who takes its batches meanwhile.
  int others = 1;
};

class ServerHealthLog {
 public:
  // A stream to `address` ended; what to say about it, if anything.
  std::optional<HealthLine> StreamFailed(const std::string& address, const StreamFailure& failure,
                                         absl::Time now);
  // A batch arrived from `address`: the line saying it is back, when it had
  // been failing.
  std::optional<HealthLine> Delivering(const std::string& address);
  // `address`'s last failure, or "connected, not sending" (for the error a
  // stalled loader returns).
  std::string Describe(const std::string& address) const;

 private:
  struct Health {
    std::string last_error;  // empty: delivering
    absl::Time last_logged = absl::InfinitePast();
    absl::Time left_at = absl::InfinitePast();  // when it said it was leaving
  };

  absl::flat_hash_map<std::string, Health> health_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_CLIENT_SERVER_HEALTH_LOG_H_
