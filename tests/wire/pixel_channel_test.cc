#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "src/client/pixel_channel_reader.h"
#include "src/common/net/unix_socket.h"
#include "src/server/pixel_channel_listener.h"
#include "tests/testing/status_testing.h"

namespace heterodl {
namespace {

std::shared_ptr<const std::vector<uint8_t>> Pattern(size_t bytes, uint8_t seed) {
  auto pixels = std::make_shared<std::vector<uint8_t>>(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    (*pixels)[i] = static_cast<uint8_t>(i * 131 + seed);
  }
  return pixels;
}

// Collects the callbacks of one test's sends.
class SendLog {
 public:
  PixelChannel::SentCallback Expect(int id) {
    return [this, id](bool sent) {
      absl::MutexLock lock(&mu_);
      results_.emplace_back(id, sent);
    };
  }
  // Waits for `count` callbacks; returns them in the order they ran.
  std::vector<std::pair<int, bool>> Await(size_t count) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, count]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return results_.size() >= count; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(20));
    return results_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::pair<int, bool>> results_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<PixelChannelListener>> Listen(PixelChannelLimits limits = {}) {
  return PixelChannelListener::Listen("127.0.0.1", 0, limits);
}

absl::StatusOr<std::unique_ptr<PixelChannelReader>> Connect(const PixelChannelListener& listener,
                                                            const PixelTicket& ticket) {
  return PixelChannelReader::Connect("127.0.0.1", listener.port(), ticket, absl::Seconds(5));
}

// A plain socket to the listener, for what a loader would never send.
int RawConnection(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  return fd;
}

// True when the server closed `fd` within a few seconds.
bool ClosedByServer(int fd) {
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  uint8_t byte;
  return ::recv(fd, &byte, 1, 0) <= 0 && errno != EAGAIN;
}

TEST(PixelTicketTest, TicketsAreFreshAndRoundTrip) {
  const PixelTicket a = NewPixelTicket();
  const PixelTicket b = NewPixelTicket();
  EXPECT_NE(a, b);
  EXPECT_EQ(PixelTicketFromBytes(PixelTicketBytes(a)), a);
  EXPECT_FALSE(PixelTicketFromBytes("short").has_value());
}

TEST(PixelChannelTest, BytesArriveInOrderWhicheverSideComesFirst) {
  // Declared first: callbacks run on the listener's thread until the
  // listener is gone, so the log they write to must outlive it.
  SendLog log;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelListener> listener, Listen());
  for (bool connect_first : {true, false}) {
    SCOPED_TRACE(connect_first ? "connection first" : "claim first");
    const PixelTicket ticket = NewPixelTicket();
    std::unique_ptr<PixelChannelReader> reader;
    if (connect_first) {
      ASSERT_OK_AND_ASSIGN(reader, Connect(*listener, ticket));
    }
    absl::StatusOr<std::shared_ptr<PixelChannel>> channel = listener->Claim(ticket);
    ASSERT_TRUE(channel.ok()) << channel.status();
    // Queued before the connection arrives, in the second case.
    const int first_id = connect_first ? 0 : 3;
    std::vector<std::shared_ptr<const std::vector<uint8_t>>> sent;
    for (int i = 0; i < 3; ++i) {
      sent.push_back(Pattern(40'000'000 / (i + 1), static_cast<uint8_t>(i)));
      (*channel)->Send(OutgoingPixels::Share(sent.back()), log.Expect(first_id + i));
    }
    if (!connect_first) {
      ASSERT_OK_AND_ASSIGN(reader, Connect(*listener, ticket));
    }
    for (const auto& expected : sent) {
      std::vector<uint8_t> received(expected->size());
      ASSERT_TRUE(reader->ReadExactly(received.data(), received.size()).ok());
      EXPECT_TRUE(received == *expected);
    }
    const std::vector<std::pair<int, bool>> results = log.Await(first_id + 3);
    const std::vector<std::pair<int, bool>> expected = {
        {first_id, true}, {first_id + 1, true}, {first_id + 2, true}};
    const std::vector<std::pair<int, bool>> this_round(results.begin() + first_id, results.end());
    EXPECT_EQ(this_round, expected);
  }
}

TEST(PixelChannelTest, ChannelsOfOneListenerAreIndependent) {
  // Declared first: callbacks run on the listener's thread until the
  // listener is gone, so the log they write to must outlive it.
  SendLog log;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelListener> listener, Listen());
  const PixelTicket first_ticket = NewPixelTicket();
  const PixelTicket second_ticket = NewPixelTicket();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelReader> first, Connect(*listener, first_ticket));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelReader> second,
                       Connect(*listener, second_ticket));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<PixelChannel> first_channel, listener->Claim(first_ticket));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<PixelChannel> second_channel,
                       listener->Claim(second_ticket));
  // The first loader never reads its 64 MB; the second still gets its bytes.
  first_channel->Send(OutgoingPixels::Share(Pattern(64 << 20, 1)), log.Expect(1));
  const auto pixels = Pattern(1 << 20, 2);
  second_channel->Send(OutgoingPixels::Share(pixels), log.Expect(2));
  std::vector<uint8_t> received(pixels->size());
  ASSERT_TRUE(second->ReadExactly(received.data(), received.size()).ok());
  EXPECT_TRUE(received == *pixels);
  // Closing the stuck one fails its send; the listener carries on.
  first_channel->Close();
  const auto results = log.Await(2);
  EXPECT_NE(std::find(results.begin(), results.end(), std::make_pair(1, false)), results.end());
  EXPECT_NE(std::find(results.begin(), results.end(), std::make_pair(2, true)), results.end());
  std::vector<uint8_t> rest(64 << 20);
  EXPECT_FALSE(first->ReadExactly(rest.data(), rest.size()).ok());
}

TEST(PixelChannelTest, ALoaderThatGoesAwayFailsItsSends) {
  // Declared first: callbacks run on the listener's thread until the
  // listener is gone, so the log they write to must outlive it.
  SendLog log;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelListener> listener, Listen());
  const PixelTicket ticket = NewPixelTicket();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelReader> reader, Connect(*listener, ticket));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<PixelChannel> channel, listener->Claim(ticket));
  reader.reset();
  channel->Send(OutgoingPixels::Share(Pattern(64 << 20, 3)), log.Expect(1));
  EXPECT_EQ(log.Await(1), (std::vector<std::pair<int, bool>>{{1, false}}));
  // A send after the break fails too, from the listener's thread.
  channel->Send(OutgoingPixels::Share(Pattern(10, 4)), log.Expect(2));
  EXPECT_EQ(log.Await(2).back(), std::make_pair(2, false));
}

TEST(PixelChannelTest, AClaimWhoseConnectionNeverComesBreaksAfterTheTimeout) {
  // Declared first: callbacks run on the listener's thread until the
  // listener is gone, so the log they write to must outlive it.
  SendLog log;
  PixelChannelLimits limits;
  limits.attach_timeout = absl::Milliseconds(300);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelListener> listener, Listen(limits));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<PixelChannel> channel, listener->Claim(NewPixelTicket()));
  channel->Send(OutgoingPixels::Share(Pattern(100, 5)), log.Expect(1));
  EXPECT_EQ(log.Await(1), (std::vector<std::pair<int, bool>>{{1, false}}));
}

TEST(PixelChannelTest, ATicketIsClaimedOnce) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelListener> listener, Listen());
  const PixelTicket ticket = NewPixelTicket();
  // Held: a channel dropped at once is closed, and the listener's thread may
  // forget its ticket before the second claim.
  ASSERT_OK_AND_ASSIGN(const std::shared_ptr<PixelChannel> claimed, listener->Claim(ticket));
  EXPECT_TRUE(absl::IsAlreadyExists(listener->Claim(ticket).status()));
}

TEST(PixelChannelTest, StrangersAndUnclaimedConnectionsAreClosed) {
  PixelChannelLimits limits;
  limits.attach_timeout = absl::Milliseconds(300);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelListener> listener, Listen(limits));
  // Not the protocol.
  const int stranger = RawConnection(listener->port());
  ASSERT_EQ(::send(stranger, "GET / HTTP/1.1\r\n\r\n", 18, 0), 18);
  EXPECT_TRUE(ClosedByServer(stranger));
  ::close(stranger);
  // A greeting cut short, then silence.
  const int silent = RawConnection(listener->port());
  ASSERT_EQ(::send(silent, kPixelChannelMagic, 4, 0), 4);
  EXPECT_TRUE(ClosedByServer(silent));
  ::close(silent);
  // A ticket no stream claims.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelReader> unclaimed,
                       Connect(*listener, NewPixelTicket()));
  uint8_t byte;
  EXPECT_FALSE(unclaimed->ReadExactly(&byte, 1).ok());
}

TEST(PixelChannelTest, UnpairedConnectionsAreBounded) {
  // Declared first: callbacks run on the listener's thread until the
  // listener is gone, so the log they write to must outlive it.
  SendLog log;
  PixelChannelLimits limits;
  limits.max_unpaired = 2;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelListener> listener, Listen(limits));
  std::vector<std::unique_ptr<PixelChannelReader>> waiting;
  std::vector<PixelTicket> tickets;
  for (int i = 0; i < 3; ++i) {
    tickets.push_back(NewPixelTicket());
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelReader> reader,
                         Connect(*listener, tickets.back()));
    waiting.push_back(std::move(reader));
    listener->AwaitTurn();  // accepted in this order
  }
  uint8_t byte;
  EXPECT_FALSE(waiting[2]->ReadExactly(&byte, 1).ok());  // refused
  // The first two still pair.
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<PixelChannel> channel, listener->Claim(tickets[0]));
  channel->Send(OutgoingPixels::Share(Pattern(1, 7)), log.Expect(1));
  ASSERT_TRUE(waiting[0]->ReadExactly(&byte, 1).ok());
  EXPECT_EQ(byte, 7);
  EXPECT_EQ(log.Await(1), (std::vector<std::pair<int, bool>>{{1, true}}));
}

TEST(PixelChannelTest, InterruptEndsABlockedRead) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelListener> listener, Listen());
  const PixelTicket ticket = NewPixelTicket();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelReader> reader, Connect(*listener, ticket));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<PixelChannel> channel, listener->Claim(ticket));
  absl::Notification done;
  absl::Status status;
  std::thread blocked([&] {
    std::vector<uint8_t> pixels(1000);
    status = reader->ReadExactly(pixels.data(), pixels.size());
    done.Notify();
  });
  EXPECT_FALSE(done.WaitForNotificationWithTimeout(absl::Milliseconds(200)));
  reader->Interrupt();
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  blocked.join();
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
}

TEST(PixelChannelTest, DestroyingTheListenerRunsTheCallbacksOwed) {
  // Declared first: callbacks run on the listener's thread until the
  // listener is gone, so the log they write to must outlive it.
  SendLog log;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelListener> listener, Listen());
  const PixelTicket ticket = NewPixelTicket();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelReader> reader, Connect(*listener, ticket));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<PixelChannel> channel, listener->Claim(ticket));
  channel->Send(OutgoingPixels::Share(Pattern(64 << 20, 8)), log.Expect(1));  // never read
  listener.reset();
  EXPECT_EQ(log.Await(1), (std::vector<std::pair<int, bool>>{{1, false}}));
}

TEST(PixelChannelTest, ConnectErrorsNameTheAddress) {
  // A port nothing listens on: bind one, note it, close it.
  int port;
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelListener> listener, Listen());
    port = listener->port();
  }
  absl::StatusOr<std::unique_ptr<PixelChannelReader>> reader =
      PixelChannelReader::Connect("127.0.0.1", port, NewPixelTicket(), absl::Seconds(2));
  ASSERT_FALSE(reader.ok());
  EXPECT_NE(reader.status().message().find(absl::StrCat("127.0.0.1:", port)), std::string::npos)
      << reader.status();
}

// A same-host connection made by hand, its hello sent: what
// PixelChannelReader::ConnectLocal does.
int RawLocalConnection(const std::string& name, const PixelTicket& ticket) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  absl::StatusOr<AbstractAddress> address = AbstractSocketAddress(name);
  if (!address.ok() || ::connect(fd, address->as_sockaddr(), address->length) != 0) {
    return -1;
  }
  uint8_t hello[kPixelChannelHelloBytes];
  std::memcpy(hello, kPixelChannelMagic, sizeof(kPixelChannelMagic));
  std::memcpy(hello + sizeof(kPixelChannelMagic), ticket.data(), ticket.size());
  EXPECT_EQ(::send(fd, hello, sizeof(hello), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(hello)));
  return fd;
}

// One record off a raw same-host connection; the descriptor that came with
// it, or -1.
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

// Same host: batches built in shared regions, the loader on the Unix socket.
class SameHostChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(listener_, PixelChannelListener::Listen("127.0.0.1", 0, {}, regions_));
    ASSERT_FALSE(listener_->local_socket().empty());
  }
  // A batch buffer of the server's pool holding Pattern(bytes, seed).
  OutgoingPixels Batch(size_t bytes, uint8_t seed) {
    absl::StatusOr<PooledBuffer> buffer = pool_->Get(bytes);
    EXPECT_TRUE(buffer.ok());
    const auto pattern = Pattern(bytes, seed);
    std::memcpy(buffer->data(), pattern->data(), bytes);
    return OutgoingPixels::Own(*std::move(buffer));
  }
  absl::StatusOr<std::unique_ptr<PixelChannelReader>> ConnectLocal(const PixelTicket& ticket) {
    return PixelChannelReader::ConnectLocal(listener_->local_socket(), ticket, absl::Seconds(5));
  }
  // The process's mappings of pixel regions: the server's and the loader's
  // (both in this process).
  static int MappedRegions() {
    std::ifstream maps("/proc/self/maps");
    int count = 0;
    for (std::string line; std::getline(maps, line);) {
      if (line.find("heterodl-pixels") != std::string::npos) {
        ++count;
      }
    }
    return count;
  }

  // Declared first: callbacks run on the listener's thread until the
  // listener is gone, so the log they write to must outlive it.
  SendLog log_;
  std::shared_ptr<SharedRegions> regions_ = SharedRegions::Create();
  // max_free 0: every buffer is freed once sent, so its region is forgotten.
  std::shared_ptr<BufferPool> pool_ = BufferPool::Create(0, regions_->allocator());
  std::unique_ptr<PixelChannelListener> listener_;
};

TEST_F(SameHostChannelTest, PixelsAreCopiedFromSharedMemoryAndKeptUntilAcked) {
  const PixelTicket ticket = NewPixelTicket();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelReader> reader, ConnectLocal(ticket));
  EXPECT_TRUE(reader->local());
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<PixelChannel> channel, listener_->Claim(ticket));
  channel->Send(Batch(3 << 20, 1), log_.Expect(1));
  // Pixels outside the regions (a synthetic batch) follow the record inline.
  const auto heap = Pattern(1 << 20, 2);
  channel->Send(OutgoingPixels::Share(heap), log_.Expect(2));
  channel->Send(Batch(5000, 3), log_.Expect(3));
  // Nothing is released before the loader has copied: its memory would be
  // reused under the copy. Two whole turns of the listener: whatever it does
  // with what was sent, it has done.
  listener_->AwaitTurn();
  listener_->AwaitTurn();
  EXPECT_TRUE(log_.Await(0).empty());

  std::vector<uint8_t> received(3 << 20);
  ASSERT_OK(reader->ReadExactly(received.data(), received.size()));
  EXPECT_TRUE(received == *Pattern(3 << 20, 1));
  received.resize(1 << 20);
  ASSERT_OK(reader->ReadExactly(received.data(), received.size()));
  EXPECT_TRUE(received == *heap);
  received.resize(5000);
  ASSERT_OK(reader->ReadExactly(received.data(), received.size()));
  EXPECT_TRUE(received == *Pattern(5000, 3));
  EXPECT_EQ(log_.Await(3), (std::vector<std::pair<int, bool>>{{1, true}, {2, true}, {3, true}}));
}

TEST_F(SameHostChannelTest, AWrongSizeIsDataLossNotACopyPastTheRegion) {
  const PixelTicket ticket = NewPixelTicket();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelReader> reader, ConnectLocal(ticket));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<PixelChannel> channel, listener_->Claim(ticket));
  channel->Send(Batch(4096, 1), log_.Expect(1));
  std::vector<uint8_t> received(1 << 20);
  const absl::Status status = reader->ReadExactly(received.data(), received.size());
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
}

TEST_F(SameHostChannelTest, FreedRegionsAreUnmappedByTheLoader) {
  const PixelTicket ticket = NewPixelTicket();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelReader> reader, ConnectLocal(ticket));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<PixelChannel> channel, listener_->Claim(ticket));
  std::vector<uint8_t> received(1 << 20);
  for (int i = 0; i < 30; ++i) {
    channel->Send(Batch(1 << 20, static_cast<uint8_t>(i)), log_.Expect(i));
    ASSERT_OK(reader->ReadExactly(received.data(), received.size()));
    EXPECT_TRUE(received == *Pattern(1 << 20, static_cast<uint8_t>(i))) << i;
    log_.Await(i + 1);
  }
  // 30 regions were made and freed; the loader has unmapped all but the
  // last one or two (a region's kForget comes with the next record).
  EXPECT_LE(MappedRegions(), 2);
  EXPECT_EQ(regions_->live(), 0u);
}

TEST_F(SameHostChannelTest, AnEndedChannelKeepsPixelsUntilTheLoaderLetsGo) {
  // A loader by hand, to end the channel exactly between a record's arrival
  // and the loader's copy.
  const PixelTicket ticket = NewPixelTicket();
  const int loader = RawLocalConnection(listener_->local_socket(), ticket);
  ASSERT_GE(loader, 0);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<PixelChannel> channel, listener_->Claim(ticket));
  channel->Send(Batch(1 << 20, 1), log_.Expect(1));
  channel->Send(Batch(1 << 20, 2), log_.Expect(2));
  PixelRecord first, second;
  const int first_region = ReadRecord(loader, first);
  const int second_region = ReadRecord(loader, second);
  ASSERT_EQ(first.kind, PixelRecordKind::kShared);
  ASSERT_EQ(second.kind, PixelRecordKind::kShared);
  ASSERT_GE(first_region, 0);
  ASSERT_GE(second_region, 0);

  // The server ends the channel (it finishes the stream: it is leaving)
  // while the loader is about to copy both.
  channel->Close();
  listener_->AwaitTurn();
  listener_->AwaitTurn();
  EXPECT_TRUE(log_.Await(0).empty()) << "released while the loader may still copy";
  ASSERT_OK_AND_ASSIGN(MappedRegion mapped, MapSharedRegion(first_region, first.bytes));
  EXPECT_EQ(std::memcmp(mapped.data + first.offset, Pattern(1 << 20, 1)->data(), 1 << 20), 0);
  UnmapSharedRegion(mapped);
  ::close(second_region);
  // The first is acked; then the loader lets go, and the second is released
  // unread.
  ASSERT_EQ(::send(loader, &kPixelAck, 1, MSG_NOSIGNAL), 1);
  EXPECT_EQ(log_.Await(1), (std::vector<std::pair<int, bool>>{{1, true}}));
  uint8_t byte;
  EXPECT_EQ(::recv(loader, &byte, 1, 0), 0) << "the server has ended its side";
  ::close(loader);
  EXPECT_EQ(log_.Await(2), (std::vector<std::pair<int, bool>>{{1, true}, {2, false}}));
}

TEST_F(SameHostChannelTest, NoSuchSocketIsRefusedAtOnce) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<PixelChannelReader>> reader = PixelChannelReader::ConnectLocal(
      "heterodl-pixels-nobody-listens-here", NewPixelTicket(), absl::Seconds(30));
  ASSERT_FALSE(reader.ok());
  EXPECT_TRUE(absl::IsUnavailable(reader.status())) << reader.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "not a wait for the timeout";
}

}  // namespace
}  // namespace heterodl
