#include "src/wire/pixel_channel.h"

#include <sys/random.h>

#include <cstring>

namespace heterodl {

PixelTicket NewPixelTicket() {
  PixelTicket ticket;
  size_t filled = 0;
  while (filled < ticket.size()) {
    const ssize_t n = getrandom(ticket.data() + filled, ticket.size() - filled, 0);
    if (n > 0) filled += static_cast<size_t>(n);
  }
  return ticket;
}

std::string PixelTicketBytes(const PixelTicket& ticket) {
  return std::string(reinterpret_cast<const char*>(ticket.data()), ticket.size());
}

std::optional<PixelTicket> PixelTicketFromBytes(absl::string_view bytes) {
  PixelTicket ticket;
  if (bytes.size() != ticket.size()) return std::nullopt;
  std::memcpy(ticket.data(), bytes.data(), ticket.size());
  return ticket;
}

}  // namespace heterodl
