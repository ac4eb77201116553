// EndpointProbe: what is listening at an address that accepted a connection
// but did not answer as a gRPC server does.
//
// gRPC reports such an address as it reports a server that is still
// starting ("Connection reset by peer", "Socket closed"), so a loader given
// a data server's pixel port, or the port of something else entirely, would
// wait out its whole connect timeout. The probe opens a TCP connection of
// its own, sends what a gRPC client sends first (HTTP/2's connection
// preface) and reads the first bytes of the reply:
//
//   if (std::optional<std::string> why = ExplainWrongEndpoint(address, {})) {
//     return absl::InvalidArgumentError(*why);  // not a server to wait for
//   }
//
// Blocking; a few hundred milliseconds at most beside a refused connection.
#ifndef HETERODL_SRC_CLIENT_ENDPOINT_PROBE_H_
#define HETERODL_SRC_CLIENT_ENDPOINT_PROBE_H_

#include <optional>
#include <string>

#include "absl/time/time.h"

namespace heterodl {

struct EndpointProbeOptions {
  // For the connection and for the first bytes of the reply each.
  absl::Duration timeout = absl::Milliseconds(500);
  // The loader speaks TLS itself: a TLS reply is then no mistake to report.
  bool loader_uses_tls = false;
};

// Why `address` ("host:port") is not a heterodl data server's service port,
// when its reply says so (a sentence about "this" address, for the caller to
// prefix with it): a data server's pixel port (naming the service
// port to use), a TLS server reached in plaintext, or anything else that
// answers and is not HTTP/2. nullopt when the probe learns nothing that
// rules a data server out: the connection is refused or times out, the
// peer closes without a word, or it answers with HTTP/2 as gRPC does.
std::optional<std::string> ExplainWrongEndpoint(const std::string& address,
                                                const EndpointProbeOptions& options);

}  // namespace heterodl

#endif  // HETERODL_SRC_CLIENT_ENDPOINT_PROBE_H_
