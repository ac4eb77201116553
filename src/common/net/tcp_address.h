// What the pixel channel's two ends and the server share of plain TCP:
// resolving a host and port, probing a bind, connecting with a deadline, and
// the text of an errno.
#ifndef HETERODL_SRC_COMMON_NET_TCP_ADDRESS_H_
#define HETERODL_SRC_COMMON_NET_TCP_ADDRESS_H_

#include <netdb.h>
#include <sys/socket.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/common/net/unique_fd.h"

namespace heterodl {

struct AddressInfoDeleter {
  void operator()(addrinfo* info) const { freeaddrinfo(info); }
};
// getaddrinfo's list, freed with it.
using AddressInfo = std::unique_ptr<addrinfo, AddressInfoDeleter>;

// The TCP addresses of `host` (a name or an address; empty with `passive`:
// every interface) and `port`. UNAVAILABLE naming the host when it does not
// resolve.
absl::StatusOr<AddressInfo> ResolveTcp(const std::string& host, int port, bool passive);

// Why a TCP listener cannot bind `host`:`port` now, as bind(2) says it
// ("Address already in use", "Cannot assign requested address"), or OK when
// it could. For a diagnosis after a listener failed to start (gRPC says only
// that it did): the socket is closed again at once.
absl::Status ProbeTcpBind(const std::string& host, int port);

// A socket of `family` connected to `address` within `deadline`, left
// non-blocking. Errors are UNAVAILABLE (DEADLINE_EXCEEDED for the
// deadline), `where`: the reason, e.g. "pixel channel to host:port:
// Connection refused".
absl::StatusOr<UniqueFd> ConnectSocket(int family, const sockaddr* address, socklen_t length,
                                       const std::string& where, absl::Time deadline);

// strerror's text of `error`.
std::string ErrnoText(int error);

}  // namespace heterodl

#endif  // HETERODL_SRC_COMMON_NET_TCP_ADDRESS_H_
