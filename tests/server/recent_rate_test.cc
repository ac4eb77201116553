#include "src/server/recent_rate.h"

#include "gtest/gtest.h"

namespace heterodl {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'000'000);

TEST(RecentRateTest, NothingNotedIsZero) {
  RecentRate rate(absl::Seconds(10));
  EXPECT_EQ(rate.PerSecond(0, kStart), 0);
}

TEST(RecentRateTest, MeasuresTheLastWindowNotTheLifetime) {
  RecentRate rate(absl::Seconds(10));
  // 100/s for a minute, then 1000/s for 30 s.
  uint64_t count = 0;
  absl::Time now = kStart;
  for (int s = 0; s < 60; ++s, now += absl::Seconds(1)) {
    rate.Note(count += 100, now);
  }
  for (int s = 0; s < 30; ++s, now += absl::Seconds(1)) {
    rate.Note(count += 1000, now);
  }
  EXPECT_NEAR(rate.PerSecond(count, now), 1000, 100);
}

TEST(RecentRateTest, AnIdleServerFallsToZero) {
  RecentRate rate(absl::Seconds(10));
  uint64_t count = 0;
  absl::Time now = kStart;
  for (int s = 0; s < 20; ++s, now += absl::Seconds(1)) {
    rate.Note(count += 500, now);
  }
  EXPECT_GT(rate.PerSecond(count, now), 400);
  EXPECT_EQ(rate.PerSecond(count, now + absl::Minutes(5)), 0);
}

TEST(RecentRateTest, OneEarlyBatchIsNotABurst) {
  RecentRate rate(absl::Seconds(10));
  rate.Note(0, kStart);
  // 256 samples 10 ms after the first note: over at least a second.
  EXPECT_LE(rate.PerSecond(256, kStart + absl::Milliseconds(10)), 256);
}

}  // namespace
}  // namespace heterodl
