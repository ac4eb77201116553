// Live statistics of a data server, for `heterodl status` and tests.
#ifndef HETERODL_SRC_CLIENT_SERVER_STATUS_H_
#define HETERODL_SRC_CLIENT_SERVER_STATUS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "heterodl/data_service.pb.h"
#include "src/client/data_group_capacity.h"
#include "src/common/net/tls_config.h"

namespace heterodl {

// Asks `address` (host:port) for its statistics (what it serves, its rates
// since start and over the last seconds, its streams). Unavailable /
// DeadlineExceeded name the server when it does not answer within `timeout`.
absl::StatusOr<v1::ServerStats> FetchServerStatus(const std::string& address,
                                                  absl::Duration timeout,
                                                  const std::string& auth_token = "",
                                                  const TlsConfig& tls = {});

// Images/s the server's decode threads would build if they were never idle:
// its threads times the samples it sent per second of their read, decode and
// augment time. What `heterodl status` sizes a data group from; 0 before the
// server has built anything.
double BuildCapacity(const v1::ServerStats& stats);

// The data group of these servers: the mean BuildCapacity of those that have
// built something, and how many they are.
DataGroupCapacity MeasureDataGroup(const std::vector<v1::ServerStats>& servers);

}  // namespace heterodl

#endif  // HETERODL_SRC_CLIENT_SERVER_STATUS_H_
