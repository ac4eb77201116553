#include "src/metrics/prometheus_text.h"

#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace heterodl {
namespace {

TEST(PrometheusTextTest, FamiliesHaveHelpTypeAndTheirSamples) {
  PrometheusText text;
  text.Counter("heterodl_samples_total", "Samples built.",
               {{{{"status", "ok"}}, 1024}, {{{"status", "replaced"}}, 3}});
  text.Gauge("heterodl_data_hosts_needed", "Hosts needed.", {{{}, 2.5}});
  EXPECT_EQ(std::move(text).Take(),
            "# HELP heterodl_samples_total Samples built.\n"
            "# TYPE heterodl_samples_total counter\n"
            "heterodl_samples_total{status=\"ok\"} 1024\n"
            "heterodl_samples_total{status=\"replaced\"} 3\n"
            "# HELP heterodl_data_hosts_needed Hosts needed.\n"
            "# TYPE heterodl_data_hosts_needed gauge\n"
            "heterodl_data_hosts_needed 2.5\n");
}

TEST(PrometheusTextTest, LabelValuesAreEscapedAndValuesFormattedAsGoReadsThem) {
  PrometheusText text;
  text.Gauge("g", "h",
             {{{{"path", "a\\b\"c\nd"}, {"x", "y"}}, 1},
              {{}, std::numeric_limits<double>::infinity()},
              {{}, std::numeric_limits<double>::quiet_NaN()},
              {{}, 9007199254740993.0},  // past 2^53: not printed as an integer
              {{}, 0.1}});
  const std::string body = std::move(text).Take();
  EXPECT_NE(body.find("g{path=\"a\\\\b\\\"c\\nd\",x=\"y\"} 1\n"), std::string::npos) << body;
  EXPECT_NE(body.find("g +Inf\n"), std::string::npos);
  EXPECT_NE(body.find("g NaN\n"), std::string::npos);
  EXPECT_NE(body.find("g 9007199254740992\n"), std::string::npos) << body;
  EXPECT_NE(body.find("g 0.1\n"), std::string::npos) << body;
}

TEST(PrometheusTextTest, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  MetricHistogram histogram({0.001, 0.01, 0.1});
  for (const double value : {0.0005, 0.001, 0.05, 0.05, 3.0}) {
    histogram.Observe(value);
  }
  EXPECT_EQ(histogram.count(), 5u);
  EXPECT_EQ(histogram.above(), 1u);
  PrometheusText text;
  text.Histogram("wait_seconds", "Waits.", histogram);
  EXPECT_EQ(std::move(text).Take(),
            "# HELP wait_seconds Waits.\n"
            "# TYPE wait_seconds histogram\n"
            "wait_seconds_bucket{le=\"0.001\"} 2\n"
            "wait_seconds_bucket{le=\"0.01\"} 2\n"
            "wait_seconds_bucket{le=\"0.1\"} 4\n"
            "wait_seconds_bucket{le=\"+Inf\"} 5\n"
            "wait_seconds_sum 3.1015\n"
            "wait_seconds_count 5\n");
}

}  // namespace
}  // namespace heterodl
