#include "src/server/refusal_log.h"

#include <optional>
#include <string>

#include "gtest/gtest.h"

namespace heterodl {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

TEST(RefusalLogTest, AFloodOfRefusalsIsOneLinePerIntervalAndEveryOneIsCounted) {
  RefusalLog log(absl::Seconds(10));
  std::optional<std::string> first =
      log.Refused(RefusalKind::kUnauthenticated, "ipv4:10.0.0.9:4000", kStart);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(*first, "refused a call from ipv4:10.0.0.9:4000: missing or wrong auth token");
  // 20,000 more within the interval: nothing said, all counted.
  int lines = 0;
  for (int i = 1; i <= 20'000; ++i) {
    lines += log.Refused(RefusalKind::kUnauthenticated, "ipv4:10.0.0.9:4000",
                         kStart + absl::Microseconds(i * 90))
                 .has_value();
  }
  EXPECT_EQ(lines, 0);
  EXPECT_EQ(log.count(RefusalKind::kUnauthenticated), 20'001u);
  // The next line, an interval on, says how many came meanwhile.
  std::optional<std::string> next =
      log.Refused(RefusalKind::kUnauthenticated, "ipv4:10.0.0.9:4001", kStart + absl::Seconds(10));
  ASSERT_TRUE(next.has_value());
  EXPECT_NE(next->find("(20001 such refusals"), std::string::npos) << *next;
  EXPECT_NE(next->find("20002 since start"), std::string::npos) << *next;
}

TEST(RefusalLogTest, KindsAreSaidAndCountedApart) {
  RefusalLog log(absl::Seconds(10));
  EXPECT_TRUE(log.Refused(RefusalKind::kUnauthenticated, "a", kStart).has_value());
  std::optional<std::string> limit = log.Refused(RefusalKind::kStreamLimit, "b", kStart);
  ASSERT_TRUE(limit.has_value());
  EXPECT_NE(limit->find("--max-streams"), std::string::npos) << *limit;
  EXPECT_EQ(log.count(RefusalKind::kUnauthenticated), 1u);
  EXPECT_EQ(log.count(RefusalKind::kStreamLimit), 1u);
  std::optional<std::string> host = log.Refused(RefusalKind::kHostStreamLimit, "c", kStart);
  ASSERT_TRUE(host.has_value());
  EXPECT_EQ(*host,
            "refused a call from c: its host's share of streams open (--max-streams-per-host)");
  std::optional<std::string> unread = log.Refused(RefusalKind::kUnreadStream, "d", kStart);
  ASSERT_TRUE(unread.has_value());
  EXPECT_EQ(unread->rfind("ended a stream of d: it held its batches unread", 0), 0u) << *unread;
  EXPECT_EQ(log.count(RefusalKind::kHostStreamLimit), 1u);
  EXPECT_EQ(log.count(RefusalKind::kUnreadStream), 1u);
}

}  // namespace
}  // namespace heterodl
