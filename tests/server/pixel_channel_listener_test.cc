// The server's end of the pixel channel: pairing connections with the
// streams that claim their tickets, sends and their callbacks, what it
// refuses, and (same host) when it releases a batch's memory. The loader is
// a real PixelChannelReader, or a raw socket where it must misbehave.
#include "src/server/pixel_channel_listener.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/pixel_channel_testing.h"
#include "tests/testing/status_testing.h"

namespace heterodl {
namespace {

TEST(PixelChannelListenerTest, ChannelsOfOneListenerAreIndependent) {
  // Declared first: callbacks run on the listener's thread until the
  // listener is gone, so the log they write to must outlive it.
  SendLog log;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelListener> listener, ListenOnLoopback());
  const PixelTicket first_ticket = NewPixelTicket();
  const PixelTicket second_ticket = NewPixelTicket();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelReader> first,
                       ConnectOverTcp(*listener, first_ticket));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelReader> second,
                       ConnectOverTcp(*listener, second_ticket));
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

TEST(PixelChannelListenerTest, ALoaderThatGoesAwayFailsItsSends) {
  // Declared first: callbacks run on the listener's thread until the
  // listener is gone, so the log they write to must outlive it.
  SendLog log;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelListener> listener, ListenOnLoopback());
  const PixelTicket ticket = NewPixelTicket();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelReader> reader,
                       ConnectOverTcp(*listener, ticket));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<PixelChannel> channel, listener->Claim(ticket));
  reader.reset();
  channel->Send(OutgoingPixels::Share(Pattern(64 << 20, 3)), log.Expect(1));
  EXPECT_EQ(log.Await(1), (std::vector<std::pair<int, bool>>{{1, false}}));
  // A send after the break fails too, from the listener's thread.
  channel->Send(OutgoingPixels::Share(Pattern(10, 4)), log.Expect(2));
  EXPECT_EQ(log.Await(2).back(), std::make_pair(2, false));
}

TEST(PixelChannelListenerTest, AClaimWhoseConnectionNeverComesBreaksAfterTheTimeout) {
  // Declared first: callbacks run on the listener's thread until the
  // listener is gone, so the log they write to must outlive it.
  SendLog log;
  PixelChannelLimits limits;
  limits.attach_timeout = absl::Milliseconds(300);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelListener> listener, ListenOnLoopback(limits));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<PixelChannel> channel, listener->Claim(NewPixelTicket()));
  channel->Send(OutgoingPixels::Share(Pattern(100, 5)), log.Expect(1));
  EXPECT_EQ(log.Await(1), (std::vector<std::pair<int, bool>>{{1, false}}));
}

TEST(PixelChannelListenerTest, ATicketIsClaimedOnce) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelListener> listener, ListenOnLoopback());
  const PixelTicket ticket = NewPixelTicket();
  // Held: a channel dropped at once is closed, and the listener's thread may
  // forget its ticket before the second claim.
  ASSERT_OK_AND_ASSIGN(const std::shared_ptr<PixelChannel> claimed, listener->Claim(ticket));
  EXPECT_TRUE(absl::IsAlreadyExists(listener->Claim(ticket).status()));
}

TEST(PixelChannelListenerTest, StrangersAndUnclaimedConnectionsAreClosed) {
  PixelChannelLimits limits;
  limits.attach_timeout = absl::Milliseconds(300);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelListener> listener, ListenOnLoopback(limits));
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
                       ConnectOverTcp(*listener, NewPixelTicket()));
  uint8_t byte;
  EXPECT_FALSE(unclaimed->ReadExactly(&byte, 1).ok());
}

TEST(PixelChannelListenerTest, UnpairedConnectionsAreBounded) {
  // Declared first: callbacks run on the listener's thread until the
  // listener is gone, so the log they write to must outlive it.
  SendLog log;
  PixelChannelLimits limits;
  limits.max_unpaired = 2;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelListener> listener, ListenOnLoopback(limits));
  std::vector<std::unique_ptr<PixelChannelReader>> waiting;
  std::vector<PixelTicket> tickets;
  for (int i = 0; i < 3; ++i) {
    tickets.push_back(NewPixelTicket());
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelReader> reader,
                         ConnectOverTcp(*listener, tickets.back()));
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

TEST(PixelChannelListenerTest, DestroyingTheListenerRunsTheCallbacksOwed) {
  // Declared first: callbacks run on the listener's thread until the
  // listener is gone, so the log they write to must outlive it.
  SendLog log;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelListener> listener, ListenOnLoopback());
  const PixelTicket ticket = NewPixelTicket();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelReader> reader,
                       ConnectOverTcp(*listener, ticket));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<PixelChannel> channel, listener->Claim(ticket));
  channel->Send(OutgoingPixels::Share(Pattern(64 << 20, 8)), log.Expect(1));  // never read
  listener.reset();
  EXPECT_EQ(log.Await(1), (std::vector<std::pair<int, bool>>{{1, false}}));
}

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

}  // namespace
}  // namespace heterodl
