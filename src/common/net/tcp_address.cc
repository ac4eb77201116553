#include "src/common/net/tcp_address.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/common/net/unique_fd.h"

namespace heterodl {

absl::StatusOr<AddressInfo> ResolveTcp(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) {
    hints.ai_flags = AI_PASSIVE;
  }
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

namespace {

absl::Status AwaitConnect(int fd, const std::string& where, absl::Time deadline) {
  while (true) {
    pollfd poll_fd{fd, POLLOUT, 0};
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0) {
      return absl::DeadlineExceededError(absl::StrCat(where, ": timed out"));
    }
    const int ready = ::poll(&poll_fd, 1, static_cast<int>(left));
    if (ready <= 0) {
      continue;  // interrupted, or the deadline: checked above
    }
    int error = 0;
    socklen_t length = sizeof(error);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) {
      return absl::UnavailableError(absl::StrCat(where, ": ", ErrnoText(error)));
    }
    return absl::OkStatus();
  }
}

}  // namespace

absl::StatusOr<UniqueFd> ConnectSocket(int family, const sockaddr* address, socklen_t length,
                                       const std::string& where, absl::Time deadline) {
  UniqueFd socket(::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!socket.valid()) {
    return absl::UnavailableError(absl::StrCat(where, ": socket: ", ErrnoText(errno)));
  }
  if (::connect(socket.get(), address, length) != 0 && errno != EINPROGRESS) {
    return absl::UnavailableError(absl::StrCat(where, ": ", ErrnoText(errno)));
  }
  absl::Status connected = AwaitConnect(socket.get(), where, deadline);
  if (!connected.ok()) {
    return connected;
  }
  return socket;
}

absl::Status ProbeTcpBind(const std::string& host, int port) {
  absl::StatusOr<AddressInfo> addresses = ResolveTcp(host, port, /*passive=*/true);
  if (!addresses.ok()) {
    return addresses.status();
  }
  for (const addrinfo* a = addresses->get(); a != nullptr; a = a->ai_next) {
    UniqueFd socket(::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!socket.valid()) {
      continue;
    }
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
