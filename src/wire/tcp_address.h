// What the pixel channel's two ends share of plain TCP: resolving a host and
// port, and the text of an errno.
#ifndef HETERODL_SRC_WIRE_TCP_ADDRESS_H_
#define HETERODL_SRC_WIRE_TCP_ADDRESS_H_

#include <netdb.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

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

// strerror's text of `error`.
std::string ErrnoText(int error);

}  // namespace heterodl

#endif  // HETERODL_SRC_WIRE_TCP_ADDRESS_H_
