// How the remote loader's pixels travel: copied from a same-host server's
// shared memory, on a pixel channel beside gRPC, or inside gRPC when the
// server offers no channel or its port cannot be reached; the batches are the
// same every way.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "src/client/remote_loader.h"
#include "src/client/server_status.h"
#include "tests/testing/served_dataset.h"
#include "tests/testing/test_images.h"

namespace heterodl {
namespace {

using testing::RunningServer;

class PixelTransportTest : public testing::ServedDatasetTest {};

// Forwards TCP connections from 127.0.0.2:port() to a target port on
// 127.0.0.1, byte for byte: a server reached through it has its gRPC service
// at 127.0.0.2 but nothing else there, as behind a firewall that opens only
// the service's port.
class TcpForwarder {
 public:
  explicit TcpForwarder(int target_port) : target_port_(target_port) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address = Loopback(2, 0);
    socklen_t length = sizeof(address);
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&address), length), 0);
    EXPECT_EQ(::listen(listener_, 16), 0);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  ~TcpForwarder() {
    ::shutdown(listener_, SHUT_RDWR);
    acceptor_.join();
    ::close(listener_);
    {
      absl::MutexLock lock(&mu_);
      for (int fd : sockets_) {
        ::shutdown(fd, SHUT_RDWR);
      }
    }
    for (std::thread& pump : pumps_) {
      pump.join();
    }
    for (int fd : sockets_) {
      ::close(fd);
    }
  }
  std::string address() const { return absl::StrCat("127.0.0.2:", port_); }

 private:
  static sockaddr_in Loopback(int last_byte, int port) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(0x7f000000 | last_byte);
    return address;
  }
  void AcceptLoop() {
    while (true) {
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) {
        return;
      }
      const int server = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in target = Loopback(1, target_port_);
      if (::connect(server, reinterpret_cast<sockaddr*>(&target), sizeof(target)) != 0) {
        ::close(client);
        ::close(server);
        continue;
      }
      absl::MutexLock lock(&mu_);
      sockets_.insert(sockets_.end(), {client, server});
      pumps_.emplace_back([client, server] { Pump(client, server); });
      pumps_.emplace_back([client, server] { Pump(server, client); });
    }
  }
  static void Pump(int from, int to) {
    char buffer[1 << 16];
    while (true) {
      const ssize_t n = ::recv(from, buffer, sizeof(buffer), 0);
      if (n <= 0 || ::send(to, buffer, static_cast<size_t>(n), MSG_NOSIGNAL) != n) {
        break;
      }
    }
    ::shutdown(to, SHUT_WR);
  }

  const int target_port_;
  int listener_ = -1;
  int port_ = 0;
  std::thread acceptor_;
  absl::Mutex mu_;
  std::vector<int> sockets_;  // guarded by mu_ until the acceptor is joined
  std::vector<std::thread> pumps_;
};

int PortOf(const std::string& address) { return std::stoi(address.substr(address.rfind(':') + 1)); }

// The batches of an epoch of the 60-sample test dataset for one rank hold
// every sample exactly once.
void ExpectEverySampleOnce(const std::vector<Batch>& batches) {
  std::multiset<int64_t> seen;
  for (const Batch& batch : batches) {
    seen.insert(batch.indices.begin(), batch.indices.end());
  }
  EXPECT_EQ(seen.size(), 60u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 60u);
}

// `count()` once `loader` has read a batch, polled until it is `expected`
// (streams open and close on their own threads) or 10 s have passed.
template <typename Count>
auto CountWhileReading(RemoteLoader& loader, decltype(std::declval<Count>()()) expected,
                       Count count) {
  EXPECT_TRUE(loader.SetEpoch(0).ok());
  absl::StatusOr<std::optional<Batch>> batch = loader.Next();
  EXPECT_TRUE(batch.ok() && batch->has_value());
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  auto counted = count();
  while (counted != expected && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
    counted = count();
  }
  return counted;
}

// The server's count of open streams with a pixel channel.
uint32_t PixelChannelStreamsWhileReading(RemoteLoader& loader, const std::string& server,
                                         uint32_t expected) {
  return CountWhileReading(loader, expected, [&server]() -> uint32_t {
    absl::StatusOr<v1::ServerStats> status = FetchServerStatus(server, absl::Seconds(5));
    EXPECT_TRUE(status.ok()) << status.status();
    return status.ok() ? status->pixel_channel_streams() : 0;
  });
}

TEST_F(PixelTransportTest, PixelChannelsAndGrpcCarryTheSameBatches) {
  RunningServer server(*dataset_);
  RemoteLoaderOptions options = LoaderOptions({server.address()}, 1, 2);
  auto with_channel = RemoteLoader::Connect(options);
  options.pixel_channel = false;
  auto grpc_only = RemoteLoader::Connect(options);
  ASSERT_TRUE(with_channel.ok() && grpc_only.ok());
  // Each of the loader's two connections has its channel; gRPC only has none.
  EXPECT_EQ(PixelChannelStreamsWhileReading(**with_channel, server.address(), 2), 2u);
  EXPECT_EQ(PixelChannelStreamsWhileReading(**grpc_only, server.address(), 2), 2u);
  with_channel->reset();
  EXPECT_EQ(PixelChannelStreamsWhileReading(**grpc_only, server.address(), 0), 0u);

  with_channel = RemoteLoader::Connect(LoaderOptions({server.address()}, 1, 2));
  ASSERT_TRUE(with_channel.ok());
  const std::vector<Batch> a = ReadEpoch(**with_channel, 3);
  const std::vector<Batch> b = ReadEpoch(**grpc_only, 3);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].indices, b[k].indices);
    EXPECT_EQ(a[k].labels, b[k].labels);
    EXPECT_EQ(a[k].payload.view(), b[k].payload.view()) << "batch " << k;
  }
}

// The number of the loader's open streams on a same-host channel.
int SameHostStreamsWhileReading(RemoteLoader& loader, int expected) {
  return CountWhileReading(loader, expected,
                           [&loader] { return loader.stats().same_host_streams; });
}

TEST_F(PixelTransportTest, ASameHostLoaderCopiesFromSharedMemoryTheSameBatches) {
  RunningServer server(*dataset_);
  RemoteLoaderOptions options = LoaderOptions({server.address()}, 1, 2);
  auto shared = RemoteLoader::Connect(options);
  options.same_host_pixels = false;
  auto tcp = RemoteLoader::Connect(options);
  options.pixel_channel = false;
  auto grpc_only = RemoteLoader::Connect(options);
  ASSERT_TRUE(shared.ok() && tcp.ok() && grpc_only.ok());
  EXPECT_EQ(SameHostStreamsWhileReading(**shared, 2), 2);
  EXPECT_EQ(SameHostStreamsWhileReading(**tcp, 0), 0);
  EXPECT_EQ(SameHostStreamsWhileReading(**grpc_only, 0), 0);

  // Several epochs: the server's batch buffers are reused many times over
  // while the loader keeps its mappings.
  for (uint32_t epoch = 0; epoch < 4; ++epoch) {
    const std::vector<Batch> a = ReadEpoch(**shared, epoch);
    const std::vector<Batch> b = ReadEpoch(**tcp, epoch);
    const std::vector<Batch> c = ReadEpoch(**grpc_only, epoch);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_EQ(a.size(), c.size());
    ASSERT_FALSE(a.empty());
    for (size_t k = 0; k < a.size(); ++k) {
      EXPECT_EQ(a[k].indices, b[k].indices);
      EXPECT_EQ(a[k].payload.view(), b[k].payload.view()) << "epoch " << epoch << " batch " << k;
      EXPECT_EQ(a[k].payload.view(), c[k].payload.view()) << "epoch " << epoch << " batch " << k;
    }
  }
  EXPECT_GT((*shared)->stats().same_host_streams, 0);
}

TEST_F(PixelTransportTest, SegmentationBatchesCarryTheirMasksEveryWayAndFromAnyServer) {
  const std::filesystem::path root = testing::MakePaintedSegmentationFolder("served-masks", 30, 8);
  RunningServer first(root.string());
  RunningServer second(root.string());
  RemoteLoaderOptions options = LoaderOptions({first.address()}, 0, 1);
  options.pipeline = "random_resized_crop(40x48)|hflip(0.5)|rotation(20)";
  auto shared = RemoteLoader::Connect(options);
  options.same_host_pixels = false;
  auto tcp = RemoteLoader::Connect(options);
  options.pixel_channel = false;
  options.servers.fixed = {second.address()};
  auto grpc_only = RemoteLoader::Connect(options);
  ASSERT_TRUE(shared.ok() && tcp.ok() && grpc_only.ok());
  const std::vector<Batch> a = ReadEpoch(**shared, 1);
  const std::vector<Batch> b = ReadEpoch(**tcp, 1);
  const std::vector<Batch> c = ReadEpoch(**grpc_only, 1);
  ASSERT_EQ(a.size(), 5u);  // 30 samples in batches of 7
  ASSERT_EQ(b.size(), a.size());
  ASSERT_EQ(c.size(), a.size());
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].payload.view(), b[k].payload.view()) << "batch " << k;
    EXPECT_EQ(a[k].payload.view(), c[k].payload.view()) << "batch " << k;
    ASSERT_EQ(a[k].fields.size(), 2u);
    EXPECT_EQ(a[k].fields[0].name, "images");
    const absl::StatusOr<absl::Span<const uint8_t>> masks = a[k].View<uint8_t>("masks");
    ASSERT_TRUE(masks.ok()) << masks.status();
    ASSERT_EQ(masks->size(), static_cast<size_t>(a[k].size()) * 40 * 48);
    EXPECT_TRUE(absl::IsInvalidArgument(a[k].View<int32_t>("masks").status()));
    EXPECT_TRUE(absl::IsNotFound(a[k].View<float>("boxes").status()));
    for (int64_t slot = 0; slot < a[k].size(); ++slot) {
      int64_t judged = 0;
      const int64_t off =
          testing::PixelsOffTheirClass(a[k].images().data() + slot * 40 * 48 * 3,
                                       masks->data() + slot * 40 * 48, 40, 48, 1, 1, 255, &judged);
      EXPECT_LE(off, judged / 100) << "batch " << k << ", sample " << slot;
      EXPECT_GT(judged, 40 * 48 / 2);
    }
  }
}

TEST_F(PixelTransportTest, AServerWithoutSameHostPixelsServesOnItsPixelPort) {
  DataServerOptions options = RunningServer::Options(*dataset_);
  options.same_host_pixels = false;  // serve --no-same-host-pixels
  RunningServer server(options);
  auto loader = RemoteLoader::Connect(LoaderOptions({server.address()}, 0, 1));
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ(SameHostStreamsWhileReading(**loader, 0), 0);
  EXPECT_EQ(PixelChannelStreamsWhileReading(**loader, server.address(), 2), 2u);
  ExpectEverySampleOnce(ReadEpoch(**loader, 1));
}

TEST_F(PixelTransportTest, AServerWithoutPixelChannelsServesThroughGrpc) {
  RunningServer server(*dataset_, "127.0.0.1:0", "", /*pixel_port=*/-1);
  auto loader = RemoteLoader::Connect(LoaderOptions({server.address()}, 0, 1));
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ(PixelChannelStreamsWhileReading(**loader, server.address(), 0), 0u);
  ExpectEverySampleOnce(ReadEpoch(**loader, 1));
}

TEST_F(PixelTransportTest, AnUnreachablePixelPortFallsBackToGrpc) {
  RunningServer server(*dataset_);
  TcpForwarder forwarder(PortOf(server.address()));
  // Through the forwarder the service answers, but the pixel port (bound on
  // 127.0.0.1) refuses: the loader warns and carries the pixels in gRPC.
  // (The same-host socket would be reached: this is about another host.)
  RemoteLoaderOptions options = LoaderOptions({forwarder.address()}, 0, 1);
  options.same_host_pixels = false;
  auto loader = RemoteLoader::Connect(options);
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ(PixelChannelStreamsWhileReading(**loader, server.address(), 0), 0u);
  ExpectEverySampleOnce(ReadEpoch(**loader, 1));
}

}  // namespace
}  // namespace heterodl
