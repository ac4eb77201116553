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
  ASSERT_EQ(activity_.TryOpenStream("h", {4}), StreamAdmission::kOpened);
  now_ += 10 * kStartup;
  EXPECT_EQ(activity_.TimeoutReason(kIdle, kStartup), "");
  activity_.StreamClosed("h");
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
  ASSERT_EQ(activity_.TryOpenStream("h", {1}), StreamAdmission::kOpened);
  activity_.StreamClosed("h");
  now_ += kIdle / 2;
  EXPECT_EQ(activity_.TimeoutReason(kIdle, kStartup), "");
}

TEST_F(ActivityMonitorTest, StreamsAreBoundedAndCounted) {
  EXPECT_EQ(activity_.TryOpenStream("h", {2}), StreamAdmission::kOpened);
  EXPECT_EQ(activity_.TryOpenStream("h", {2}), StreamAdmission::kOpened);
  EXPECT_EQ(activity_.TryOpenStream("h", {2}), StreamAdmission::kServerFull);
  activity_.PixelChannelStreams(1);
  activity_.BatchesRequested(3);
  activity_.BatchSent(absl::Milliseconds(250));
  v1::ServerStats stats;
  activity_.AddTo(stats);
  EXPECT_EQ(stats.active_streams(), 2u);
  EXPECT_EQ(stats.pixel_channel_streams(), 1u);
  EXPECT_EQ(stats.batches_in_flight(), 2u);
  EXPECT_DOUBLE_EQ(stats.send_seconds(), 0.25);
  activity_.StreamClosed("h");
  activity_.PixelChannelStreams(-1);
  EXPECT_EQ(activity_.TryOpenStream("h", {2}), StreamAdmission::kOpened);
  EXPECT_EQ(activity_.StreamsServed(), std::make_pair(int64_t{3}, int64_t{1}));
}

TEST_F(ActivityMonitorTest, OneHostHoldsAtMostItsShareOfTheStreams) {
  const StreamLimits limits{4, 2};
  EXPECT_EQ(activity_.TryOpenStream("ipv4:10.0.0.1", limits), StreamAdmission::kOpened);
  EXPECT_EQ(activity_.TryOpenStream("ipv4:10.0.0.1", limits), StreamAdmission::kOpened);
  EXPECT_EQ(activity_.TryOpenStream("ipv4:10.0.0.1", limits), StreamAdmission::kHostFull);
  // Another host still gets in, up to the server's limit.
  EXPECT_EQ(activity_.TryOpenStream("ipv4:10.0.0.2", limits), StreamAdmission::kOpened);
  EXPECT_EQ(activity_.TryOpenStream("ipv4:10.0.0.2", limits), StreamAdmission::kOpened);
  EXPECT_EQ(activity_.TryOpenStream("ipv4:10.0.0.3", limits), StreamAdmission::kServerFull);
  activity_.StreamClosed("ipv4:10.0.0.1");
  EXPECT_EQ(activity_.TryOpenStream("ipv4:10.0.0.3", limits), StreamAdmission::kOpened);
  EXPECT_EQ(activity_.TryOpenStream("ipv4:10.0.0.1", limits), StreamAdmission::kServerFull);
  v1::ServerStats stats;
  activity_.AddTo(stats);
  EXPECT_EQ(stats.active_streams(), 4u);
}

}  // namespace
}  // namespace heterodl
