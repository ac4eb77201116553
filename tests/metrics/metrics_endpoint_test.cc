#include "src/metrics/metrics_endpoint.h"

#include <httplib.h>

#include <atomic>
#include <string>

#include "gtest/gtest.h"

namespace heterodl {
namespace {

TEST(MetricsEndpointTest, ServesWhatRenderReturnsAtEachScrape) {
  std::atomic<int> scrapes{0};
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> endpoint = MetricsEndpoint::Start(
      "127.0.0.1", 0, [&] { return "scrapes " + std::to_string(scrapes.fetch_add(1) + 1) + "\n"; });
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  ASSERT_GT((*endpoint)->port(), 0);
  httplib::Client client("127.0.0.1", (*endpoint)->port());
  for (int i = 1; i <= 2; ++i) {
    const httplib::Result got = client.Get("/metrics");
    ASSERT_TRUE(got) << httplib::to_string(got.error());
    EXPECT_EQ(got->status, 200);
    EXPECT_EQ(got->body, "scrapes " + std::to_string(i) + "\n");
    EXPECT_EQ(got->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  }
  const httplib::Result other = client.Get("/other");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
}

TEST(MetricsEndpointTest, APortInUseIsRefusedNamingIt) {
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> first =
      MetricsEndpoint::Start("127.0.0.1", 0, [] { return std::string(); });
  ASSERT_TRUE(first.ok()) << first.status();
  const int port = (*first)->port();
  const absl::StatusOr<std::unique_ptr<MetricsEndpoint>> second =
      MetricsEndpoint::Start("127.0.0.1", port, [] { return std::string(); });
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsUnavailable(second.status()));
  EXPECT_NE(second.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << second.status();
}

TEST(MetricsEndpointTest, StopsAtOnceEvenWhenNeverScraped) {
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<std::unique_ptr<MetricsEndpoint>> endpoint =
        MetricsEndpoint::Start("127.0.0.1", 0, [] { return std::string(); });
    ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  }  // each destructor stops and joins
}

}  // namespace
}  // namespace heterodl
