#include "src/client/pixel_transport.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/common/net/unique_fd.h"
#include "tests/testing/status_testing.h"

namespace heterodl {
namespace {

// A TCP port on loopback that accepts connections (into its backlog: the
// channel's ticket is written, never read), or, closed, one that refuses.
class LoopbackPort {
 public:
  LoopbackPort() : socket_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(socket_.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    socklen_t length = sizeof(address);
    EXPECT_EQ(::getsockname(socket_.get(), reinterpret_cast<sockaddr*>(&address), &length), 0);
    port_ = ntohs(address.sin_port);
    EXPECT_EQ(::listen(socket_.get(), 16), 0);
  }
  uint32_t port() const { return port_; }
  void Close() { socket_ = UniqueFd(); }

 private:
  UniqueFd socket_;
  uint32_t port_ = 0;
};

PixelTransportPolicy Policy() {
  PixelTransportPolicy policy;
  policy.connect_timeout = absl::Seconds(5);
  policy.retry_after = absl::Minutes(10);
  return policy;
}

TEST(PixelTransportSelectorTest, ChannelsAreUsedWhenOfferedAndWanted) {
  LoopbackPort port;
  PixelTransportSelector selector(Policy(), "127.0.0.1:50051");
  std::unique_ptr<PixelTransport> tcp = selector.Choose({port.port(), ""});
  EXPECT_EQ(tcp->path(), PixelPath::kTcpChannel);
  EXPECT_EQ(tcp->ticket().size(), 16u);
  // Every stream presents its own ticket.
  EXPECT_NE(selector.Choose({port.port(), ""})->ticket(), tcp->ticket());
  // A same-host socket that is not on this host: over TCP, silently.
  EXPECT_EQ(selector.Choose({port.port(), "heterodl-no-such-socket"})->path(),
            PixelPath::kTcpChannel);
}

TEST(PixelTransportSelectorTest, GrpcCarriesPixelsWhenNoChannelIsWantedOrOffered) {
  LoopbackPort port;
  const PixelOffer offer{port.port(), ""};
  PixelTransportPolicy off = Policy();
  off.pixel_channel = false;
  PixelTransportPolicy tls = Policy();
  tls.tls = true;
  for (const PixelTransportPolicy& policy : {off, tls}) {
    std::unique_ptr<PixelTransport> pixels =
        PixelTransportSelector(policy, "127.0.0.1:50051").Choose(offer);
    EXPECT_EQ(pixels->path(), PixelPath::kGrpc);
    EXPECT_EQ(pixels->ticket(), "");
  }
  PixelTransportSelector selector(Policy(), "127.0.0.1:50051");
  EXPECT_EQ(selector.Choose({0, ""})->path(), PixelPath::kGrpc);  // none offered
  // A gRPC target that is no host:port has no host to reach a channel on.
  EXPECT_EQ(PixelTransportSelector(Policy(), "unix:/tmp/socket").Choose(offer)->path(),
            PixelPath::kGrpc);
}

TEST(PixelTransportSelectorTest, AnUnreachablePortIsNotTriedAgainForAWhile) {
  LoopbackPort refusing;
  refusing.Close();
  LoopbackPort open;
  PixelTransportSelector selector(Policy(), "127.0.0.1:50051");
  EXPECT_EQ(selector.Choose({refusing.port(), ""})->path(), PixelPath::kGrpc);
  // Within retry_after even a port that answers is not tried: a firewall
  // that drops the channel's connections would cost every stream a timeout.
  EXPECT_EQ(selector.Choose({open.port(), ""})->path(), PixelPath::kGrpc);

  PixelTransportPolicy brief = Policy();
  brief.retry_after = absl::ZeroDuration();
  PixelTransportSelector retrying(brief, "127.0.0.1:50051");
  EXPECT_EQ(retrying.Choose({refusing.port(), ""})->path(), PixelPath::kGrpc);
  EXPECT_EQ(retrying.Choose({open.port(), ""})->path(), PixelPath::kTcpChannel);
}

DecodedBatch BatchWithInlinePixels(BufferPool& pool, size_t bytes) {
  DecodedBatch batch;
  batch.header.mutable_id()->set_index(7);
  auto pixels = pool.Get(bytes);
  EXPECT_TRUE(pixels.ok());
  batch.pixels = *std::move(pixels);
  return batch;
}

TEST(PixelTransportReceiveTest, InlinePixelsMustBeWhatThePlanMakes) {
  std::shared_ptr<BufferPool> pool = BufferPool::Create(4);
  PixelTransportPolicy off = Policy();
  off.pixel_channel = false;
  std::unique_ptr<PixelTransport> grpc = PixelTransportSelector(off, "127.0.0.1:1").Choose({});
  DecodedBatch right = BatchWithInlinePixels(*pool, 12);
  EXPECT_OK(grpc->Receive(right, 12, *pool));
  DecodedBatch short_batch = BatchWithInlinePixels(*pool, 11);
  const absl::Status wrong = grpc->Receive(short_batch, 12, *pool);
  EXPECT_TRUE(absl::IsDataLoss(wrong)) << wrong;
  EXPECT_NE(wrong.message().find("batch 7 carries 11 bytes"), std::string::npos) << wrong;
  // A server claiming a channel the stream never opened.
  DecodedBatch on_channel;
  on_channel.header.set_images_on_channel(12);
  const absl::Status lacking = grpc->Receive(on_channel, 12, *pool);
  EXPECT_TRUE(absl::IsDataLoss(lacking)) << lacking;
}

TEST(PixelTransportReceiveTest, AChannelStillChecksPixelsThatCameInline) {
  LoopbackPort port;
  std::shared_ptr<BufferPool> pool = BufferPool::Create(4);
  std::unique_ptr<PixelTransport> tcp =
      PixelTransportSelector(Policy(), "127.0.0.1:50051").Choose({port.port(), ""});
  ASSERT_EQ(tcp->path(), PixelPath::kTcpChannel);
  DecodedBatch right = BatchWithInlinePixels(*pool, 12);
  EXPECT_OK(tcp->Receive(right, 12, *pool));
  DecodedBatch wrong = BatchWithInlinePixels(*pool, 13);
  EXPECT_TRUE(absl::IsDataLoss(tcp->Receive(wrong, 12, *pool)));
  // Both inline and on the channel: refused before reading anything.
  DecodedBatch both = BatchWithInlinePixels(*pool, 12);
  both.header.set_images_on_channel(12);
  EXPECT_TRUE(absl::IsDataLoss(tcp->Receive(both, 12, *pool)));
  // Interrupted: a read that would wait on the silent channel fails.
  tcp->Interrupt();
  DecodedBatch waiting;
  waiting.header.set_images_on_channel(12);
  EXPECT_TRUE(absl::IsUnavailable(tcp->Receive(waiting, 12, *pool)));
}

}  // namespace
}  // namespace heterodl
