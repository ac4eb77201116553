#include "src/wire/pixel_channel.h"

#include <sys/random.h>

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace heterodl {
namespace {

constexpr absl::string_view kNoticePrefix =
    "heterodl pixel channel port; the data service is on port ";

}  // namespace

std::string PixelPortNotice(int service_port) {
  return absl::StrCat(kNoticePrefix, service_port, "\n");
}

std::optional<int> ServicePortFromNotice(absl::string_view reply) {
  if (!absl::ConsumePrefix(&reply, kNoticePrefix)) {
    return std::nullopt;
  }
  const size_t end = reply.find('\n');
  int port = 0;
  if (end == absl::string_view::npos || !absl::SimpleAtoi(reply.substr(0, end), &port) ||
      port < 0 || port > 65535) {
    return std::nullopt;
  }
  return port;
}

PixelTicket NewPixelTicket() {
  PixelTicket ticket;
  size_t filled = 0;
  while (filled < ticket.size()) {
    const ssize_t n = getrandom(ticket.data() + filled, ticket.size() - filled, 0);
    if (n > 0) {
      filled += static_cast<size_t>(n);
    }
  }
  return ticket;
}

std::string PixelTicketBytes(const PixelTicket& ticket) {
  return std::string(reinterpret_cast<const char*>(ticket.data()), ticket.size());
}

std::optional<PixelTicket> PixelTicketFromBytes(absl::string_view bytes) {
  PixelTicket ticket;
  if (bytes.size() != ticket.size()) {
    return std::nullopt;
  }
  std::memcpy(ticket.data(), bytes.data(), ticket.size());
  return ticket;
}

}  // namespace heterodl
