#include "src/wire/tcp_address.h"

#include <sys/socket.h>

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/common/net/unique_fd.h"

namespace heterodl {

absl::StatusOr<AddressInfo> ResolveTcp(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* result = nullptr;
  const std::string service = std::to_string(port);
  const int error =
      getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &result);
  if (error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve '", host, "': ", gai_strerror(error)));
  }
  return AddressInfo(result);
}

absl::Status ProbeTcpBind(const std::string& host, int port) {
  absl::StatusOr<AddressInfo> addresses = ResolveTcp(host, port, /*passive=*/true);
  if (!addresses.ok()) return addresses.status();
  for (const addrinfo* a = addresses->get(); a != nullptr; a = a->ai_next) {
    UniqueFd socket(::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!socket.valid()) continue;
    const int one = 1;
    setsockopt(socket.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(socket.get(), a->ai_addr, a->ai_addrlen) != 0) {
      const int error = errno;
      return absl::UnavailableError(ErrnoText(error));
    }
  }
  return absl::OkStatus();
}

std::string ErrnoText(int error) {
  char buffer[256];
  // The GNU strerror_r: returns the text, in `buffer` or a static string.
  return strerror_r(error, buffer, sizeof(buffer));
}

}  // namespace heterodl
