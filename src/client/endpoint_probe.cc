#include "src/client/endpoint_probe.h"

#include <poll.h>
#include <sys/socket.h>

#include <cctype>
#include <cstdint>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "src/common/net/host_port.h"
#include "src/common/net/tcp_address.h"
#include "src/wire/pixel_channel.h"

namespace heterodl {
namespace {

// What every HTTP/2 client sends first (RFC 9113, section 3.4).
constexpr absl::string_view kHttp2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr size_t kReplyBytes = 256;

// The first bytes `fd` receives before `deadline` (fewer when the peer
// closes first); empty when none came.
std::string ReadReply(int fd, absl::Time deadline) {
  std::string reply;
  char buffer[kReplyBytes];
  while (reply.size() < kReplyBytes) {
    pollfd poll_fd{fd, POLLIN, 0};
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0 || ::poll(&poll_fd, 1, static_cast<int>(left)) <= 0) {
      break;
    }
    const ssize_t n = ::recv(fd, buffer, kReplyBytes - reply.size(), MSG_DONTWAIT);
    if (n <= 0) {
      break;  // closed, reset, or a spurious wake-up
    }
    reply.append(buffer, static_cast<size_t>(n));
    // A line of text is whole at its end; a binary reply says enough at once.
    if (reply.back() == '\n' || !std::isprint(static_cast<unsigned char>(reply[0]))) {
      break;
    }
  }
  return reply;
}

// An HTTP/2 server's first frame is its SETTINGS: a 9-byte header whose
// fourth byte is the frame type, 0x4.
bool LooksLikeHttp2(absl::string_view reply) {
  return reply.size() >= 9 && static_cast<uint8_t>(reply[3]) == 0x4;
}

// A TLS record: handshake (0x16) or alert (0x15), protocol version 3.x.
bool LooksLikeTls(absl::string_view reply) {
  return reply.size() >= 3 &&
         (static_cast<uint8_t>(reply[0]) == 0x16 || static_cast<uint8_t>(reply[0]) == 0x15) &&
         static_cast<uint8_t>(reply[1]) == 0x03;
}

std::optional<std::string> Explain(const HostPort& where, absl::string_view reply,
                                   bool loader_uses_tls) {
  if (reply.empty() || LooksLikeHttp2(reply)) {
    return std::nullopt;
  }
  if (const std::optional<int> service_port = ServicePortFromNotice(reply)) {
    std::string use =
        *service_port > 0
            ? absl::StrCat("; connect to ", where.host, ":", *service_port, " instead")
            : std::string(
                  "; connect to its service port, the one `heterodl serve` "
                  "logs as 'listening on'");
    return absl::StrCat("this is a heterodl data server's pixel channel port, not its service port",
                        use);
  }
  if (LooksLikeTls(reply)) {
    if (loader_uses_tls) {
      return std::nullopt;
    }
    return std::string(
        "it answers with TLS and this loader speaks plaintext; give it the servers' CA "
        "(tls_ca / --tls-ca)");
  }
  return absl::StrCat("it answered, but not as a heterodl data server (its first bytes: '",
                      absl::CHexEscape(reply.substr(0, 60)),
                      "'); give the port `heterodl serve` logs as 'listening on'");
}

}  // namespace

std::optional<std::string> ExplainWrongEndpoint(const std::string& address,
                                                const EndpointProbeOptions& options) {
  absl::StatusOr<HostPort> where = SplitServerAddress(address);
  if (!where.ok()) {
    return std::nullopt;
  }
  absl::StatusOr<AddressInfo> addresses = ResolveTcp(where->host, where->port, /*passive=*/false);
  if (!addresses.ok()) {
    return std::nullopt;
  }
  for (const addrinfo* a = addresses->get(); a != nullptr; a = a->ai_next) {
    absl::StatusOr<UniqueFd> socket = ConnectSocket(a->ai_family, a->ai_addr, a->ai_addrlen,
                                                    address, absl::Now() + options.timeout);
    if (!socket.ok()) {
      continue;
    }
    if (::send(socket->get(), kHttp2Preface.data(), kHttp2Preface.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(kHttp2Preface.size())) {
      return std::nullopt;
    }
    const std::string reply = ReadReply(socket->get(), absl::Now() + options.timeout);
    return Explain(*where, reply, options.loader_uses_tls);
  }
  return std::nullopt;
}

}  // namespace heterodl
