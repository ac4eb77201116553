#include "src/wire/pixel_channel_reader.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/wire/tcp_address.h"

namespace heterodl {
namespace {

absl::Status AwaitConnect(int fd, const std::string& where, absl::Time deadline) {
  while (true) {
    pollfd poll_fd{fd, POLLOUT, 0};
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0) {
      return absl::DeadlineExceededError(absl::StrCat("pixel channel to ", where, ": timed out"));
    }
    const int ready = ::poll(&poll_fd, 1, static_cast<int>(left));
    if (ready <= 0) continue;  // interrupted, or the deadline: checked above
    int error = 0;
    socklen_t length = sizeof(error);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) {
      return absl::UnavailableError(
          absl::StrCat("pixel channel to ", where, ": ", ErrnoText(error)));
    }
    return absl::OkStatus();
  }
}

absl::Status SendAll(int fd, const uint8_t* data, size_t size, const std::string& where) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::UnavailableError(
          absl::StrCat("pixel channel to ", where, ": ", ErrnoText(errno)));
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// A connection to `address` with the hello sent, blocking from then on.
absl::StatusOr<UniqueFd> ConnectOne(const addrinfo& address, const std::string& where,
                                    const PixelTicket& ticket, absl::Time deadline) {
  UniqueFd socket(::socket(address.ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!socket.valid()) {
    return absl::UnavailableError(absl::StrCat("pixel channel socket: ", ErrnoText(errno)));
  }
  if (::connect(socket.get(), address.ai_addr, address.ai_addrlen) != 0 && errno != EINPROGRESS) {
    return absl::UnavailableError(absl::StrCat("pixel channel to ", where, ": ", ErrnoText(errno)));
  }
  absl::Status connected = AwaitConnect(socket.get(), where, deadline);
  if (!connected.ok()) return connected;
  // Blocking from here: the reader waits in recv() for its pixels.
  fcntl(socket.get(), F_SETFL, fcntl(socket.get(), F_GETFL) & ~O_NONBLOCK);
  uint8_t hello[kPixelChannelHelloBytes];
  std::memcpy(hello, kPixelChannelMagic, sizeof(kPixelChannelMagic));
  std::memcpy(hello + sizeof(kPixelChannelMagic), ticket.data(), ticket.size());
  absl::Status sent = SendAll(socket.get(), hello, sizeof(hello), where);
  if (!sent.ok()) return sent;
  return socket;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PixelChannelReader>> PixelChannelReader::Connect(
    const std::string& host, int port, const PixelTicket& ticket, absl::Duration timeout) {
  const std::string where = absl::StrCat(host, ":", port);
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<AddressInfo> addresses = ResolveTcp(host, port, /*passive=*/false);
  if (!addresses.ok()) return addresses.status();
  absl::Status last =
      absl::UnavailableError(absl::StrCat("pixel channel to ", where, ": no address"));
  for (const addrinfo* a = addresses->get(); a != nullptr; a = a->ai_next) {
    absl::StatusOr<UniqueFd> socket = ConnectOne(*a, where, ticket, deadline);
    if (socket.ok()) {
      return std::unique_ptr<PixelChannelReader>(new PixelChannelReader(*std::move(socket)));
    }
    last = socket.status();
  }
  return last;
}

absl::Status PixelChannelReader::ReadExactly(uint8_t* destination, size_t size) {
  size_t received = 0;
  while (received < size) {
    if (interrupted_.load()) return absl::UnavailableError("pixel channel interrupted");
    const ssize_t n = ::recv(socket_.get(), destination + received, size - received, MSG_WAITALL);
    if (n > 0) {
      received += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (interrupted_.load()) return absl::UnavailableError("pixel channel interrupted");
    return absl::UnavailableError(n == 0 ? std::string("the server closed the pixel channel")
                                         : absl::StrCat("pixel channel: ", ErrnoText(errno)));
  }
  return absl::OkStatus();
}

void PixelChannelReader::Interrupt() {
  interrupted_.store(true);
  ::shutdown(socket_.get(), SHUT_RDWR);
}

}  // namespace heterodl
