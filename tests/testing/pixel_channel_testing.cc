#include "tests/testing/pixel_channel_testing.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "src/common/net/unix_socket.h"
#include "tests/testing/status_testing.h"

namespace heterodl {

std::shared_ptr<const std::vector<uint8_t>> Pattern(size_t bytes, uint8_t seed) {
  auto pixels = std::make_shared<std::vector<uint8_t>>(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    (*pixels)[i] = static_cast<uint8_t>(i * 131 + seed);
  }
  return pixels;
}

PixelChannel::SentCallback SendLog::Expect(int id) {
  return [this, id](bool sent) {
    absl::MutexLock lock(&mu_);
    results_.emplace_back(id, sent);
  };
}

std::vector<std::pair<int, bool>> SendLog::Await(size_t count) {
  absl::MutexLock lock(&mu_);
  auto enough = [this, count]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return results_.size() >= count; };
  mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(20));
  return results_;
}

absl::StatusOr<std::unique_ptr<PixelChannelListener>> ListenOnLoopback(PixelChannelLimits limits) {
  return PixelChannelListener::Listen("127.0.0.1", 0, limits);
}

absl::StatusOr<std::unique_ptr<PixelChannelReader>> ConnectOverTcp(
    const PixelChannelListener& listener, const PixelTicket& ticket) {
  return PixelChannelReader::Connect("127.0.0.1", listener.port(), ticket, absl::Seconds(5));
}

int RawConnection(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  return fd;
}

bool ClosedByServer(int fd) {
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  uint8_t byte;
  return ::recv(fd, &byte, 1, 0) <= 0 && errno != EAGAIN;
}

int RawLocalConnection(const std::string& name, const PixelTicket& ticket) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  absl::StatusOr<AbstractAddress> address = AbstractSocketAddress(name);
  if (!address.ok() || ::connect(fd, address->as_sockaddr(), address->length) != 0) {
    ::close(fd);
    return -1;
  }
  uint8_t hello[kPixelChannelHelloBytes];
  std::memcpy(hello, kPixelChannelMagic, sizeof(kPixelChannelMagic));
  std::memcpy(hello + sizeof(kPixelChannelMagic), ticket.data(), ticket.size());
  EXPECT_EQ(::send(fd, hello, sizeof(hello), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(hello)));
  return fd;
}

int ReadRecord(int fd, PixelRecord& record) {
  int passed = -1;
  size_t received = 0;
  while (received < sizeof(record)) {
    ReceivedBytes got = ReceiveWithDescriptors(fd, reinterpret_cast<uint8_t*>(&record) + received,
                                               sizeof(record) - received);
    if (got.bytes <= 0) {
      return -1;
    }
    if (!got.descriptors.empty()) {
      passed = got.descriptors.front().release();
    }
    received += static_cast<size_t>(got.bytes);
  }
  return passed;
}

void SameHostChannelTest::SetUp() {
  ASSERT_OK_AND_ASSIGN(listener_, PixelChannelListener::Listen("127.0.0.1", 0, {}, regions_));
  ASSERT_FALSE(listener_->local_socket().empty());
}

OutgoingPixels SameHostChannelTest::Batch(size_t bytes, uint8_t seed) {
  absl::StatusOr<PooledBuffer> buffer = pool_->Get(bytes);
  EXPECT_TRUE(buffer.ok());
  const auto pattern = Pattern(bytes, seed);
  std::memcpy(buffer->data(), pattern->data(), bytes);
  return OutgoingPixels::Own(*std::move(buffer));
}

absl::StatusOr<std::unique_ptr<PixelChannelReader>> SameHostChannelTest::ConnectLocal(
    const PixelTicket& ticket) {
  return PixelChannelReader::ConnectLocal(listener_->local_socket(), ticket, absl::Seconds(5));
}

int SameHostChannelTest::MappedRegions() {
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("heterodl-pixels") != std::string::npos) {
      ++count;
    }
  }
  return count;
}

}  // namespace heterodl
