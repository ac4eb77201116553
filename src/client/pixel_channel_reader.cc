#include "src/client/pixel_channel_reader.h"

#include <fcntl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/common/net/tcp_address.h"
#include "src/common/net/unix_socket.h"

namespace heterodl {
namespace {

absl::Status SendAll(int fd, const uint8_t* data, size_t size, const std::string& where) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) {
      continue;
    }
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
absl::StatusOr<UniqueFd> ConnectOne(int family, const sockaddr* address, socklen_t length,
                                    const std::string& where, const PixelTicket& ticket,
                                    absl::Time deadline) {
  absl::StatusOr<UniqueFd> socket =
      ConnectSocket(family, address, length, absl::StrCat("pixel channel to ", where), deadline);
  if (!socket.ok()) {
    return socket.status();
  }
  // Blocking from here: the reader waits in recv() for its pixels.
  fcntl(socket->get(), F_SETFL, fcntl(socket->get(), F_GETFL) & ~O_NONBLOCK);
  uint8_t hello[kPixelChannelHelloBytes];
  std::memcpy(hello, kPixelChannelMagic, sizeof(kPixelChannelMagic));
  std::memcpy(hello + sizeof(kPixelChannelMagic), ticket.data(), ticket.size());
  absl::Status sent = SendAll(socket->get(), hello, sizeof(hello), where);
  if (!sent.ok()) {
    return sent;
  }
  return socket;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PixelChannelReader>> PixelChannelReader::Connect(
    const std::string& host, int port, const PixelTicket& ticket, absl::Duration timeout) {
  const std::string where = absl::StrCat(host, ":", port);
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<AddressInfo> addresses = ResolveTcp(host, port, /*passive=*/false);
  if (!addresses.ok()) {
    return addresses.status();
  }
  absl::Status last =
      absl::UnavailableError(absl::StrCat("pixel channel to ", where, ": no address"));
  for (const addrinfo* a = addresses->get(); a != nullptr; a = a->ai_next) {
    absl::StatusOr<UniqueFd> socket =
        ConnectOne(a->ai_family, a->ai_addr, a->ai_addrlen, where, ticket, deadline);
    if (socket.ok()) {
      return std::unique_ptr<PixelChannelReader>(
          new PixelChannelReader(*std::move(socket), /*local=*/false));
    }
    last = socket.status();
  }
  return last;
}

absl::StatusOr<std::unique_ptr<PixelChannelReader>> PixelChannelReader::ConnectLocal(
    const std::string& socket_name, const PixelTicket& ticket, absl::Duration timeout) {
  const std::string where = absl::StrCat("same-host socket @", socket_name);
  absl::StatusOr<AbstractAddress> address = AbstractSocketAddress(socket_name);
  if (!address.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("pixel channel: bad ", where));
  }
  absl::StatusOr<UniqueFd> socket = ConnectOne(AF_UNIX, address->as_sockaddr(), address->length,
                                               where, ticket, absl::Now() + timeout);
  if (!socket.ok()) {
    return socket.status();
  }
  return std::unique_ptr<PixelChannelReader>(
      new PixelChannelReader(*std::move(socket), /*local=*/true));
}

PixelChannelReader::~PixelChannelReader() {
  for (const auto& [id, region] : regions_) {
    UnmapSharedRegion(region);
  }
}

absl::Status PixelChannelReader::Unavailable(const std::string& what) const {
  if (interrupted_.load()) {
    return absl::UnavailableError("pixel channel interrupted");
  }
  return absl::UnavailableError(what);
}

absl::Status PixelChannelReader::ReadRecord(PixelRecord& record, UniqueFd& descriptor) {
  auto* bytes = reinterpret_cast<uint8_t*>(&record);
  size_t received = 0;
  while (received < sizeof(record)) {
    // Descriptors that came are owned (and so closed) before anything is
    // judged.
    ReceivedBytes got =
        ReceiveWithDescriptors(socket_.get(), bytes + received, sizeof(record) - received);
    if (got.bytes < 0 && got.error == EINTR) {
      continue;
    }
    if (got.truncated || got.descriptors.size() > 1) {
      return absl::DataLossError("same-host pixel channel: more descriptors than one");
    }
    if (!got.descriptors.empty()) {
      if (descriptor.valid() || received > 0) {
        return absl::DataLossError("same-host pixel channel: an unexpected descriptor");
      }
      descriptor = std::move(got.descriptors.front());
    }
    if (got.bytes <= 0) {
      return Unavailable(got.bytes == 0 ? std::string("the server closed the pixel channel")
                                        : absl::StrCat("pixel channel: ", ErrnoText(got.error)));
    }
    received += static_cast<size_t>(got.bytes);
  }
  return absl::OkStatus();
}

absl::Status PixelChannelReader::ReadLocal(uint8_t* destination, size_t size) {
  while (true) {
    PixelRecord record;
    UniqueFd descriptor;
    if (absl::Status read = ReadRecord(record, descriptor); !read.ok()) {
      return read;
    }
    switch (record.kind) {
      case PixelRecordKind::kForget: {
        auto it = regions_.find(record.region);
        if (it != regions_.end()) {
          UnmapSharedRegion(it->second);
          regions_.erase(it);
        }
        if (descriptor.valid()) {
          return absl::DataLossError("same-host pixel channel: a descriptor with kForget");
        }
        continue;
      }
      case PixelRecordKind::kInline: {
        if (record.bytes != size || descriptor.valid()) {
          return absl::DataLossError(absl::StrCat("same-host pixel channel: ", record.bytes,
                                                  " inline bytes where ", size, " were due"));
        }
        return ReadBytes(destination, size);
      }
      case PixelRecordKind::kShared:
        break;
      default:
        return absl::DataLossError(absl::StrCat("same-host pixel channel: record kind ",
                                                static_cast<uint32_t>(record.kind)));
    }
    if (record.bytes != size) {
      return absl::DataLossError(absl::StrCat("same-host pixel channel: ", record.bytes,
                                              " bytes where ", size, " were due"));
    }
    auto it = regions_.find(record.region);
    if (descriptor.valid()) {
      // At most a few dozen regions live at once (the server's batch pool);
      // a server that never says kForget is cut off before it maps this
      // process full.
      constexpr size_t kMaxRegions = 4096;
      if (it != regions_.end()) {
        return absl::DataLossError(
            absl::StrCat("same-host pixel channel: region ", record.region, " sent again"));
      }
      if (regions_.size() >= kMaxRegions) {
        return absl::DataLossError(absl::StrCat("same-host pixel channel: more than ", kMaxRegions,
                                                " regions mapped at once"));
      }
      absl::StatusOr<MappedRegion> mapped = MapSharedRegion(descriptor.release(), 0);
      if (!mapped.ok()) {
        return absl::DataLossError(mapped.status().message());
      }
      it = regions_.emplace(record.region, *mapped).first;
    }
    if (it == regions_.end()) {
      return absl::DataLossError(
          absl::StrCat("same-host pixel channel: region ", record.region, " was never sent"));
    }
    const MappedRegion& region = it->second;
    if (record.offset > region.bytes || size > region.bytes - record.offset) {
      return absl::DataLossError(absl::StrCat("same-host pixel channel: ", size, " bytes at ",
                                              record.offset, " of a region of ", region.bytes));
    }
    std::memcpy(destination, region.data + record.offset, size);
    // The server reuses the memory only after the ack or after this end
    // closes, and Interrupt() sets the flag before it closes: a copy that
    // raced with reuse is caught here.
    if (interrupted_.load()) {
      return absl::UnavailableError("pixel channel interrupted");
    }
    while (true) {
      const ssize_t n = ::send(socket_.get(), &kPixelAck, 1, MSG_NOSIGNAL);
      if (n == 1) {
        return absl::OkStatus();
      }
      if (!(n < 0 && errno == EINTR)) {
        return Unavailable(absl::StrCat("pixel channel: ", ErrnoText(errno)));
      }
    }
  }
}

absl::Status PixelChannelReader::ReadExactly(uint8_t* destination, size_t size) {
  return local_ ? ReadLocal(destination, size) : ReadBytes(destination, size);
}

absl::Status PixelChannelReader::ReadBytes(uint8_t* destination, size_t size) {
  size_t received = 0;
  while (received < size) {
    if (interrupted_.load()) {
      return absl::UnavailableError("pixel channel interrupted");
    }
    const ssize_t n = ::recv(socket_.get(), destination + received, size - received, MSG_WAITALL);
    if (n > 0) {
      received += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    return Unavailable(n == 0 ? std::string("the server closed the pixel channel")
                              : absl::StrCat("pixel channel: ", ErrnoText(errno)));
  }
  return absl::OkStatus();
}

void PixelChannelReader::Interrupt() {
  interrupted_.store(true);
  ::shutdown(socket_.get(), SHUT_RDWR);
}

}  // namespace heterodl
