#include "src/metrics/server_metrics.h"

#include <string>

#include "gtest/gtest.h"
#include "tests/metrics/promtool_check.h"

namespace heterodl {
namespace {

v1::ServerStats SomeStats() {
  v1::ServerStats stats;
  stats.set_batches_sent(12);
  stats.set_samples_sent(3072);
  stats.set_samples_failed(5);
  stats.set_samples_replaced(4);
  stats.set_worker_threads(2);
  stats.set_decode_seconds(3.0);
  stats.set_augment_seconds(1.0);
  stats.set_recent_images_per_second(512.5);
  stats.set_uptime_seconds(10);
  stats.set_dataset("/data/\"train\"");
  return stats;
}

TEST(ServerMetricsTest, SamplesAreCountedByOutcome) {
  const std::string text = RenderServerMetrics(SomeStats(), "1.2.3");
  EXPECT_NE(text.find("heterodl_samples_total{status=\"ok\"} 3067\n"), std::string::npos) << text;
  EXPECT_NE(text.find("heterodl_samples_total{status=\"replaced\"} 4\n"), std::string::npos);
  EXPECT_NE(text.find("heterodl_samples_total{status=\"failed\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("heterodl_batches_total 12\n"), std::string::npos);
  EXPECT_NE(text.find("heterodl_build_info{version=\"1.2.3\",role=\"data\"} 1\n"),
            std::string::npos);
  // 3072 samples in 4 thread seconds, 2 threads: 1536 a second never idle.
  EXPECT_NE(text.find("heterodl_server_capacity_samples_per_second 1536\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("heterodl_server_recent_samples_per_second 512.5\n"), std::string::npos);
}

TEST(ServerMetricsTest, PromtoolFindsNothingToSay) {
  if (!HavePromtool()) {
    GTEST_SKIP() << "promtool not installed (Debian's prometheus package; CI installs it)";
  }
  EXPECT_EQ(PromtoolComplaints(RenderServerMetrics(SomeStats(), "1.2.3"), "server_metrics"), "");
}

}  // namespace
}  // namespace heterodl
