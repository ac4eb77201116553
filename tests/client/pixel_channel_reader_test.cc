// The loader's end of the pixel channel: connecting (and saying why not),
// interrupting a read, and (same host) copying out of shared regions,
// refusing a record that does not fit and unmapping what the server freed.
#include "src/client/pixel_channel_reader.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/pixel_channel_testing.h"
#include "tests/testing/status_testing.h"

namespace heterodl {
namespace {

TEST(PixelChannelReaderTest, InterruptEndsABlockedRead) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelListener> listener, ListenOnLoopback());
  const PixelTicket ticket = NewPixelTicket();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelReader> reader,
                       ConnectOverTcp(*listener, ticket));
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

TEST(PixelChannelReaderTest, ConnectErrorsNameTheAddress) {
  // A port nothing listens on: bind one, note it, close it.
  int port;
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<PixelChannelListener> listener, ListenOnLoopback());
    port = listener->port();
  }
  absl::StatusOr<std::unique_ptr<PixelChannelReader>> reader =
      PixelChannelReader::Connect("127.0.0.1", port, NewPixelTicket(), absl::Seconds(2));
  ASSERT_FALSE(reader.ok());
  EXPECT_NE(reader.status().message().find(absl::StrCat("127.0.0.1:", port)), std::string::npos)
      << reader.status();
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
