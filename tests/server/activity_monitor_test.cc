#include "src/server/activity_monitor.h"

#include "gtest/gtest.h"

namespace heterodl {
namespace {

constexpr absl::Duration kIdle = absl::Minutes(10);
constexpr absl::Duration kStartup = absl::Minutes(30);

// A monitor on a clock the test moves.
class ActivityMonitorTest : public ::testing::Test {
 protected:
  absl::Time now_ = absl::FromUnixSeconds(1'000'000);
  ActivityMonitor activity_{[this] { return now_; }};
};

TEST_F(ActivityMonitorTest, WithNoClientEverItLeavesAfterTheStartupTimeout) {
  now_ += kStartup;
  EXPECT_EQ(activity_.TimeoutReason(kIdle, kStartup), "");  // not past it yet
  now_ += absl::Seconds(1);
  EXPECT_EQ(activity_.TimeoutReason(kIdle, kStartup),
            "no client came within the startup timeout of 30m");
}

TEST_F(ActivityMonitorTest, AnOpenStreamIsNeverIdleHoweverLong) {
  ASSERT_TRUE(activity_.TryOpenStream(4));
  now_ += 10 * kStartup;
  EXPECT_EQ(activity_.TimeoutReason(kIdle, kStartup), "");
  activity_.StreamClosed();
  now_ += kIdle - absl::Seconds(1);
  EXPECT_EQ(activity_.TimeoutReason(kIdle, kStartup), "");
  now_ += absl::Seconds(2);
  EXPECT_EQ(activity_.TimeoutReason(kIdle, kStartup), "no client for the idle timeout of 10m");
}

TEST_F(ActivityMonitorTest, AnyCallRestartsTheIdleClock) {
  activity_.Touch();  // a status query, a dataset description
  now_ += kIdle - absl::Seconds(1);
  activity_.Touch();
  now_ += kIdle - absl::Seconds(1);
  EXPECT_EQ(activity_.TimeoutReason(kIdle, kStartup), "");
  // A refused stream is activity too: a client is there.
  ASSERT_TRUE(activity_.TryOpenStream(1));
  activity_.StreamClosed();
  now_ += kIdle / 2;
  EXPECT_EQ(activity_.TimeoutReason(kIdle, kStartup), "");
}

TEST_F(ActivityMonitorTest, StreamsAreBoundedAndCounted) {
  EXPECT_TRUE(activity_.TryOpenStream(2));
  EXPECT_TRUE(activity_.TryOpenStream(2));
  EXPECT_FALSE(activity_.TryOpenStream(2));
  activity_.PixelChannelStreams(1);
  activity_.BatchesRequested(3);
  activity_.BatchSent(absl::Milliseconds(250));
  v1::ServerStats stats;
  activity_.AddTo(stats);
  EXPECT_EQ(stats.active_streams(), 2u);
  EXPECT_EQ(stats.pixel_channel_streams(), 1u);
  EXPECT_EQ(stats.batches_in_flight(), 2u);
  EXPECT_DOUBLE_EQ(stats.send_seconds(), 0.25);
  activity_.StreamClosed();
  activity_.PixelChannelStreams(-1);
  EXPECT_TRUE(activity_.TryOpenStream(2));
  EXPECT_EQ(activity_.StreamsServed(), std::make_pair(int64_t{3}, int64_t{1}));
}

}  // namespace
}  // namespace heterodl
