#include "src/metrics/feed_metrics.h"

#include <cstdlib>
#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "tests/metrics/promtool_check.h"

namespace heterodl {
namespace {

// The value of the sample written exactly as `series` ("name{labels}"), or
// nullopt when the text has no such line.
std::optional<double> SampleValue(const std::string& text, const std::string& series) {
  const std::string prefix = "\n" + series + " ";
  const size_t at = ("\n" + text).find(prefix);
  if (at == std::string::npos) {
    return std::nullopt;
  }
  return std::strtod(text.c_str() + at + prefix.size() - 1, nullptr);
}

TEST(FeedMetricsTest, CountsStepsAndSamplesByOutcome) {
  FeedMetrics feed("train", 2);
  feed.RecordStep({0.2, 0.05, 64, 0});
  feed.RecordStep({0.3, 0.0, 64, 3});
  feed.RecordStep({4.0, 3.0, 10, 10});
  const std::string text = feed.Render(std::nullopt, "1.2.3");
  EXPECT_EQ(SampleValue(text, "heterodl_steps_total"), 3) << text;
  EXPECT_EQ(SampleValue(text, "heterodl_delivered_samples_total{status=\"ok\"}"), 64 + 61);
  EXPECT_EQ(SampleValue(text, "heterodl_delivered_samples_total{status=\"failed\"}"), 13);
  EXPECT_EQ(SampleValue(text, "heterodl_world_size"), 2);
  EXPECT_EQ(SampleValue(text, "heterodl_build_info{version=\"1.2.3\",role=\"train\"}"), 1);
  // Histograms are cumulative: 0.2 and 0.3 under 0.5, all three under 5.
  EXPECT_EQ(SampleValue(text, "heterodl_step_seconds_bucket{le=\"0.25\"}"), 1);
  EXPECT_EQ(SampleValue(text, "heterodl_step_seconds_bucket{le=\"0.5\"}"), 2);
  EXPECT_EQ(SampleValue(text, "heterodl_step_seconds_bucket{le=\"5\"}"), 3);
  EXPECT_EQ(SampleValue(text, "heterodl_step_seconds_count"), 3);
  EXPECT_DOUBLE_EQ(*SampleValue(text, "heterodl_step_seconds_sum"), 4.5);
  EXPECT_EQ(SampleValue(text, "heterodl_data_wait_seconds_bucket{le=\"0.0005\"}"), 1);
  EXPECT_DOUBLE_EQ(*SampleValue(text, "heterodl_data_wait_seconds_sum"), 3.05);
  // 3.05 s of 4.5 s waited.
  EXPECT_DOUBLE_EQ(*SampleValue(text, "heterodl_data_stall_ratio"), 3.05 / 4.5);
}

TEST(FeedMetricsTest, StallRatioIsTheRecentStepsOnes) {
  FeedMetrics feed("loader", 1);
  for (int i = 0; i < 100; ++i) {
    feed.RecordStep({1.0, 0.5, 8, 0});
  }
  // Half of each step waited, in every recent window so far.
  EXPECT_DOUBLE_EQ(*SampleValue(feed.Render(std::nullopt, "v"), "heterodl_data_stall_ratio"), 0.5);
  for (int i = 0; i < 10; ++i) {
    feed.RecordStep({1.0, 0.0, 8, 0});
  }
  // The last 30 s: 20 steps that waited half their time, 10 that did not.
  EXPECT_NEAR(*SampleValue(feed.Render(std::nullopt, "v"), "heterodl_data_stall_ratio"),
              10.0 / 30.0, 1e-9);
  for (int i = 0; i < 30; ++i) {
    feed.RecordStep({1.0, 0.0, 8, 0});
  }
  EXPECT_EQ(SampleValue(feed.Render(std::nullopt, "v"), "heterodl_data_stall_ratio"), 0);
}

TEST(FeedMetricsTest, OneLongStepIsItsOwnWindow) {
  FeedMetrics feed("train", 1);
  feed.RecordStep({1.0, 0.0, 8, 0});
  feed.RecordStep({60.0, 30.0, 8, 0});
  EXPECT_DOUBLE_EQ(*SampleValue(feed.Render(std::nullopt, "v"), "heterodl_data_stall_ratio"), 0.5);
}

TEST(FeedMetricsTest, HostsNeededFollowTheDataGroupsCapacity) {
  FeedMetrics feed("train", 4);
  for (int i = 0; i < 10; ++i) {
    feed.RecordStep({0.1, 0.02, 64, 0});
  }
  // Without the data group's figures there is nothing to size with.
  const std::string unknown = feed.Render(std::nullopt, "v");
  EXPECT_EQ(unknown.find("heterodl_data_hosts"), std::string::npos) << unknown;
  EXPECT_EQ(feed.Render(DataGroupCapacity{0, 0}, "v").find("heterodl_data_hosts"),
            std::string::npos);

  // 4 ranks x 64 samples per 0.08 s of compute: 3200 samples/s wanted, 95%
  // of it (a 5% stall) from hosts of 1000/s each: 4 hosts.
  const std::string text = feed.Render(DataGroupCapacity{1000, 2}, "v");
  EXPECT_EQ(SampleValue(text, "heterodl_data_hosts"), 2) << text;
  EXPECT_EQ(SampleValue(text, "heterodl_data_capacity_per_host_samples_per_second"), 1000);
  EXPECT_EQ(SampleValue(text, "heterodl_data_hosts_needed"), 4);
  EXPECT_EQ(SampleValue(feed.Render(DataGroupCapacity{4000, 5}, "v"), "heterodl_data_hosts_needed"),
            1);
}

TEST(FeedMetricsTest, DataHostsForStallNeedsSomethingToSizeWith) {
  EXPECT_EQ(DataHostsForStall(3200, 1, 1000, 0.05), 4);
  EXPECT_EQ(DataHostsForStall(3200, 1, 1000, 0), 4);  // 3.2 rounds up
  EXPECT_EQ(DataHostsForStall(0, 1, 1000, 0.05), std::nullopt);
  EXPECT_EQ(DataHostsForStall(3200, 0, 1000, 0.05), std::nullopt);
  EXPECT_EQ(DataHostsForStall(3200, 1, 0, 0.05), std::nullopt);
}

TEST(FeedMetricsTest, NothingRecordedYetIsStillAValidExposition) {
  FeedMetrics feed("train", 1);
  const std::string text = feed.Render(std::nullopt, "v");
  EXPECT_EQ(SampleValue(text, "heterodl_steps_total"), 0);
  // No step time yet: no ratio rather than 0/0.
  EXPECT_EQ(text.find("heterodl_data_stall_ratio"), std::string::npos);
  if (HavePromtool()) {
    EXPECT_EQ(PromtoolComplaints(text, "feed_metrics_empty"), "");
  }
}

TEST(FeedMetricsTest, PromtoolFindsNothingToSay) {
  if (!HavePromtool()) {
    GTEST_SKIP() << "promtool not installed (Debian's prometheus package; CI installs it)";
  }
  FeedMetrics feed("loader", 8);
  feed.RecordStep({0.2, 0.05, 64, 1});
  EXPECT_EQ(PromtoolComplaints(feed.Render(DataGroupCapacity{900, 3}, "1.2.3"), "feed_metrics"),
            "");
}

}  // namespace
}  // namespace heterodl
