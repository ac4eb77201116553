// "host:port" strings as the launcher, gRPC and the cluster view write them.
#ifndef HETERODL_SRC_COMMON_NET_HOST_PORT_H_
#define HETERODL_SRC_COMMON_NET_HOST_PORT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace heterodl {

struct HostPort {
  std::string host;  // without the brackets of an IPv6 literal
  int port = 0;
};

// Splits "algo-2:50051", "127.0.0.1:0" or "[::1]:50051". INVALID_ARGUMENT,
// quoting `address`, when the port is missing or outside [0, 65535].
absl::StatusOr<HostPort> SplitHostPort(absl::string_view address);

// "10.0.0.7:50051", "[fd00::7]:50051": SplitHostPort's inverse.
std::string JoinHostPort(const std::string& host, int port);

// The address of a server to connect to: SplitHostPort's, with a port in
// [1, 65535] (0 means "any" only to a listener). INVALID_ARGUMENT quoting
// `address` otherwise.
absl::StatusOr<HostPort> SplitServerAddress(absl::string_view address);

// A TCP port free on loopback right now, for a server that must be told its
// port before it binds (the trainers' rendezvous store): bound and released
// at once, so another process may take it in between; the one that binds it
// then reports a clear error. UNAVAILABLE when no socket can be bound.
absl::StatusOr<int> PickFreeLoopbackPort();

}  // namespace heterodl

#endif  // HETERODL_SRC_COMMON_NET_HOST_PORT_H_
