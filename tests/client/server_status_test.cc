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

}  // namespace
}  // namespace heterodl
