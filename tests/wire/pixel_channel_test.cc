// The pixel channel's protocol (src/wire/pixel_channel.h) between its two
// real ends: tickets, and bytes in order whichever end comes first. Each
// end's own behaviour is tested beside it (tests/server/
// pixel_channel_listener_test.cc, tests/client/pixel_channel_reader_test.cc).
#include "src/wire/pixel_channel.h"

#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/pixel_channel_testing.h"
#include "tests/testing/status_testing.h"

namespace heterodl {
namespace {

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
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelListener> listener, ListenOnLoopback());
  for (bool connect_first : {true, false}) {
    SCOPED_TRACE(connect_first ? "connection first" : "claim first");
    const PixelTicket ticket = NewPixelTicket();
    std::unique_ptr<PixelChannelReader> reader;
    if (connect_first) {
      ASSERT_OK_AND_ASSIGN(reader, ConnectOverTcp(*listener, ticket));
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
      ASSERT_OK_AND_ASSIGN(reader, ConnectOverTcp(*listener, ticket));
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

}  // namespace
}  // namespace heterodl
