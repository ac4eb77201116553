#include "src/wire/pixel_channel_listener.h"
#include "src/wire/pixel_channel_reader.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/testing/status_testing.h"

namespace heterodl {
namespace {

std::shared_ptr<const std::vector<uint8_t>> Pattern(size_t bytes, uint8_t seed) {
  auto pixels = std::make_shared<std::vector<uint8_t>>(bytes);
  for (size_t i = 0; i < bytes; ++i) (*pixels)[i] = static_cast<uint8_t>(i * 131 + seed);
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
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelReader> second, Connect(*listener, second_ticket));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<PixelChannel> first_channel, listener->Claim(first_ticket));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<PixelChannel> second_channel, listener->Claim(second_ticket));
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
  ASSERT_TRUE(listener->Claim(ticket).ok());
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
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelReader> unclaimed, Connect(*listener, NewPixelTicket()));
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
    absl::SleepFor(absl::Milliseconds(100));  // accepted in this order
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

}  // namespace
}  // namespace heterodl
