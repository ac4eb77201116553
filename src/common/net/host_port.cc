#include "src/common/net/host_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "src/common/net/unique_fd.h"

namespace heterodl {

absl::StatusOr<HostPort> SplitHostPort(absl::string_view address) {
  const auto invalid = [address] {
    return absl::InvalidArgumentError(
        absl::StrCat("'", address, "' is not host:port (IPv6 literals in brackets)"));
  };
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return invalid();
  }
  absl::string_view host = address.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') {
      return invalid();
    }
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != absl::string_view::npos) {
    return invalid();  // an IPv6 literal needs its brackets
  }
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return invalid();
  }
  return HostPort{std::string(host), port};
}

std::string JoinHostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<HostPort> SplitServerAddress(absl::string_view address) {
  absl::StatusOr<HostPort> where = SplitHostPort(address);
  if (!where.ok() || where->port == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", address, "' is not host:port with a port in [1, 65535] (IPv6 literals in brackets)"));
  }
  return where;
}

absl::StatusOr<int> PickFreeLoopbackPort() {
  UniqueFd socket(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (!socket.valid() ||
      ::bind(socket.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::getsockname(socket.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return absl::UnavailableError(absl::StrCat("no free port: ", std::strerror(errno)));
  }
  return static_cast<int>(ntohs(address.sin_port));
}

}  // namespace heterodl
