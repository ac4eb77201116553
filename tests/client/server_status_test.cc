#include "src/client/server_status.h"

#include <gtest/gtest.h>

namespace heterodl {
namespace {

TEST(BuildCapacityTest, ThreadsTimesSamplesPerBusySecond) {
  v1::ServerStats stats;
  EXPECT_EQ(BuildCapacity(stats), 0);  // nothing built: not known
  stats.set_worker_threads(4);
  stats.set_samples_sent(1200);
  stats.set_read_seconds(0.5);
  stats.set_decode_seconds(2.0);
  stats.set_augment_seconds(0.5);
  // 1,200 samples in 3 thread-seconds: 400 per thread-second, 4 threads.
  EXPECT_DOUBLE_EQ(BuildCapacity(stats), 1600);
  // Idle time does not count: the same work over a longer uptime is the
  // same capacity.
  stats.set_uptime_seconds(1000);
  EXPECT_DOUBLE_EQ(BuildCapacity(stats), 1600);
}

TEST(MeasureDataGroupTest, MeansOverTheServersThatHaveBuiltSomething) {
  v1::ServerStats fast, slow, idle;
  fast.set_worker_threads(2);
  fast.set_samples_sent(3000);
  fast.set_decode_seconds(1.0);  // 6,000 images/s
  slow.set_worker_threads(1);
  slow.set_samples_sent(2000);
  slow.set_decode_seconds(1.0);  // 2,000 images/s
  const DataGroupCapacity group = MeasureDataGroup({fast, idle, slow});
  EXPECT_EQ(group.hosts, 2);
  EXPECT_DOUBLE_EQ(group.per_host, 4000);
  EXPECT_EQ(MeasureDataGroup({idle}).hosts, 0);
  EXPECT_EQ(MeasureDataGroup({}).hosts, 0);
}

}  // namespace
}  // namespace heterodl
