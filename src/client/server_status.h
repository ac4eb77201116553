// Live statistics of a data server, for `heterodl status`.
#ifndef HETERODL_SRC_CLIENT_SERVER_STATUS_H_
#define HETERODL_SRC_CLIENT_SERVER_STATUS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/common/net/tls_config.h"

namespace heterodl {

struct ServerStatus {
  std::string address;
  double uptime_seconds = 0;
  double images_per_second = 0;  // average since start
  uint32_t active_streams = 0;
  uint32_t pixel_channel_streams = 0;  // of those, streams with a pixel channel
  uint64_t batches_sent = 0;
  uint64_t samples_sent = 0;
  uint64_t samples_failed = 0;
  uint32_t worker_threads = 0;
  double read_seconds = 0;
  uint32_t batches_in_flight = 0;  // requested by clients, not yet sent
  double decode_seconds = 0;       // cumulative, summed over worker threads
  double augment_seconds = 0;
  double send_seconds = 0;
  uint64_t peak_rss_bytes = 0;
};

// Asks `address` (host:port) for its statistics. Unavailable / DeadlineExceeded
// name the server when it does not answer within `timeout`.
absl::StatusOr<ServerStatus> FetchServerStatus(const std::string& address, absl::Duration timeout,
                                               const std::string& auth_token = "",
                                               const TlsConfig& tls = {});

}  // namespace heterodl

#endif  // HETERODL_SRC_CLIENT_SERVER_STATUS_H_
