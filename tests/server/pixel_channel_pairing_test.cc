#include "src/server/pixel_channel_pairing.h"

#include "gtest/gtest.h"
#include "tests/testing/status_testing.h"

namespace heterodl {
namespace {

using Action = PixelChannelPairing::Verdict::Action;

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);
constexpr absl::Duration kAttach = absl::Seconds(10);

PixelTicket Ticket(uint8_t seed) {
  PixelTicket ticket{};
  ticket.fill(seed);
  return ticket;
}

PixelChannelPairing Pairing(int max_unpaired = 4) {
  return PixelChannelPairing({kAttach, max_unpaired});
}

TEST(PixelChannelPairingTest, AConnectionThatComesFirstWaitsForItsClaim) {
  PixelChannelPairing pairing = Pairing();
  ASSERT_TRUE(pairing.Accepted(7, kStart));
  EXPECT_EQ(pairing.Presented(7, Ticket(1), kStart).action, Action::kWait);
  ASSERT_OK_AND_ASSIGN(const PixelChannelPairing::Claimed claimed,
                       pairing.Claim(Ticket(1), kStart + absl::Seconds(3)));
  ASSERT_TRUE(claimed.attach.has_value());
  EXPECT_EQ(*claimed.attach, 7);
  EXPECT_TRUE(pairing.attached(claimed.channel));
  EXPECT_EQ(pairing.waiting_connections(), 0);
  // Paired: nothing of it expires.
  const PixelChannelPairing::Expired later = pairing.Tick(kStart + absl::Minutes(5));
  EXPECT_TRUE(later.connections.empty());
  EXPECT_TRUE(later.channels.empty());
}

TEST(PixelChannelPairingTest, AClaimThatComesFirstWaitsForItsConnection) {
  PixelChannelPairing pairing = Pairing();
  ASSERT_OK_AND_ASSIGN(const PixelChannelPairing::Claimed claimed,
                       pairing.Claim(Ticket(2), kStart));
  EXPECT_FALSE(claimed.attach.has_value());
  EXPECT_FALSE(pairing.attached(claimed.channel));
  ASSERT_TRUE(pairing.Accepted(3, kStart + absl::Seconds(1)));
  const PixelChannelPairing::Verdict verdict =
      pairing.Presented(3, Ticket(2), kStart + absl::Seconds(2));
  EXPECT_EQ(verdict.action, Action::kAttach);
  EXPECT_EQ(verdict.channel, claimed.channel);
  EXPECT_TRUE(pairing.attached(claimed.channel));
  // A second connection with the same ticket is closed, not attached.
  ASSERT_TRUE(pairing.Accepted(4, kStart + absl::Seconds(2)));
  EXPECT_EQ(pairing.Presented(4, Ticket(2), kStart + absl::Seconds(2)).action, Action::kClose);
}

TEST(PixelChannelPairingTest, EachSideWaitsAtMostTheAttachTimeout) {
  PixelChannelPairing pairing = Pairing();
  ASSERT_OK_AND_ASSIGN(const PixelChannelPairing::Claimed lonely, pairing.Claim(Ticket(5), kStart));
  ASSERT_TRUE(pairing.Accepted(8, kStart));                     // never says hello
  ASSERT_TRUE(pairing.Accepted(9, kStart + absl::Seconds(4)));  // presents, never claimed
  EXPECT_EQ(pairing.Presented(9, Ticket(6), kStart + absl::Seconds(5)).action, Action::kWait);
  PixelChannelPairing::Expired expired = pairing.Tick(kStart + kAttach);
  EXPECT_TRUE(expired.connections.empty());  // not yet: deadlines are "after"
  EXPECT_TRUE(expired.channels.empty());
  expired = pairing.Tick(kStart + kAttach + absl::Milliseconds(1));
  EXPECT_EQ(expired.connections, std::vector<int>{8});
  EXPECT_EQ(expired.channels, std::vector<uint64_t>{lonely.channel});
  // The presented ticket's deadline counts from its hello.
  expired = pairing.Tick(kStart + absl::Seconds(15) + absl::Milliseconds(1));
  EXPECT_EQ(expired.connections, std::vector<int>{9});
  EXPECT_EQ(pairing.waiting_connections(), 0);
  // An expired connection's ticket is free: a later claim waits anew.
  ASSERT_OK_AND_ASSIGN(const PixelChannelPairing::Claimed again,
                       pairing.Claim(Ticket(6), kStart + absl::Seconds(20)));
  EXPECT_FALSE(again.attach.has_value());
}

TEST(PixelChannelPairingTest, TicketsAreNeitherClaimedNorPresentedTwice) {
  PixelChannelPairing pairing = Pairing();
  ASSERT_OK_AND_ASSIGN(const PixelChannelPairing::Claimed first, pairing.Claim(Ticket(1), kStart));
  EXPECT_TRUE(absl::IsAlreadyExists(pairing.Claim(Ticket(1), kStart).status()));
  ASSERT_TRUE(pairing.Accepted(1, kStart));
  ASSERT_TRUE(pairing.Accepted(2, kStart));
  EXPECT_EQ(pairing.Presented(1, Ticket(9), kStart).action, Action::kWait);
  EXPECT_EQ(pairing.Presented(2, Ticket(9), kStart).action, Action::kClose);
  pairing.ConnectionClosed(2);
  // The first still pairs; once its channel ends, the ticket may be
  // claimed again (by a new stream).
  ASSERT_OK_AND_ASSIGN(const PixelChannelPairing::Claimed second, pairing.Claim(Ticket(9), kStart));
  EXPECT_EQ(second.attach, std::optional<int>(1));
  pairing.ChannelEnded(first.channel);
  EXPECT_OK(pairing.Claim(Ticket(1), kStart).status());
  EXPECT_EQ(pairing.open_channels(), 2);
}

TEST(PixelChannelPairingTest, WaitingConnectionsAreBoundedAndAClosedOneMakesRoom) {
  PixelChannelPairing pairing = Pairing(/*max_unpaired=*/2);
  EXPECT_TRUE(pairing.Accepted(1, kStart));
  EXPECT_TRUE(pairing.Accepted(2, kStart));
  EXPECT_FALSE(pairing.Accepted(3, kStart));
  EXPECT_EQ(pairing.Presented(1, Ticket(4), kStart).action, Action::kWait);
  pairing.ConnectionClosed(1);
  EXPECT_TRUE(pairing.Accepted(3, kStart));
  // The closed connection's ticket went with it.
  ASSERT_OK_AND_ASSIGN(const PixelChannelPairing::Claimed claimed,
                       pairing.Claim(Ticket(4), kStart));
  EXPECT_FALSE(claimed.attach.has_value());
}

}  // namespace
}  // namespace heterodl
