#include "src/client/server_health_log.h"

#include <optional>

#include "gtest/gtest.h"

namespace heterodl {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

StreamFailure Failure(const char* message) {
  return {absl::UnavailableError(message), /*left=*/false, absl::Seconds(5)};
}

TEST(ServerHealthLogTest, AFailureIsSaidWhenItStartsChangesOrHasLastedAMinute) {
  ServerHealthLog log;
  std::optional<HealthLine> line = log.StreamFailed("a:1", Failure("refused"), kStart);
  ASSERT_TRUE(line.has_value());
  EXPECT_TRUE(line->warning);
  EXPECT_EQ(line->text,
            "data server a:1: UNAVAILABLE: refused; retrying (every 5s at most) while others take "
            "its batches");
  // Every retry of every connection: not said again.
  EXPECT_FALSE(log.StreamFailed("a:1", Failure("refused"), kStart + absl::Seconds(5)));
  EXPECT_FALSE(log.StreamFailed("a:1", Failure("refused"), kStart + absl::Seconds(59)));
  // Another server is another story.
  EXPECT_TRUE(log.StreamFailed("b:1", Failure("refused"), kStart + absl::Seconds(5)));
  // A new reason, at once; the same one once a minute.
  EXPECT_TRUE(log.StreamFailed("a:1", Failure("reset"), kStart + absl::Seconds(60)));
  EXPECT_FALSE(log.StreamFailed("a:1", Failure("reset"), kStart + absl::Seconds(100)));
  EXPECT_TRUE(log.StreamFailed("a:1", Failure("reset"), kStart + absl::Seconds(121)));
  EXPECT_EQ(log.Describe("a:1"), "UNAVAILABLE: reset");
}

TEST(ServerHealthLogTest, ALoneServerIsNotSaidToHaveOthersTakeItsBatches) {
  ServerHealthLog log;
  StreamFailure alone = Failure("refused");
  alone.others = 0;
  std::optional<HealthLine> line = log.StreamFailed("a:1", alone, kStart);
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(line->text,
            "data server a:1: UNAVAILABLE: refused; retrying (every 5s at most); no other server "
            "is listed: training waits");
  StreamFailure leaving{absl::UnavailableError("server shutting down"), /*left=*/true,
                        absl::Seconds(5), /*others=*/0};
  line = log.StreamFailed("b:1", leaving, kStart);
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(line->text,
            "data server b:1 is leaving (server shutting down); no other server is listed: "
            "training waits for one");
}

TEST(ServerHealthLogTest, AServerBackToDeliveringIsSaidOnce) {
  ServerHealthLog log;
  EXPECT_FALSE(log.Delivering("a:1"));  // never failed
  EXPECT_EQ(log.Describe("a:1"), "connected, not sending");
  ASSERT_TRUE(log.StreamFailed("a:1", Failure("refused"), kStart));
  std::optional<HealthLine> back = log.Delivering("a:1");
  ASSERT_TRUE(back.has_value());
  EXPECT_FALSE(back->warning);
  EXPECT_EQ(back->text, "data server a:1: delivering again");
  EXPECT_FALSE(log.Delivering("a:1"));
  EXPECT_EQ(log.Describe("a:1"), "connected, not sending");
  // Failing again after delivering is news, within the minute too.
  EXPECT_TRUE(log.StreamFailed("a:1", Failure("refused"), kStart + absl::Seconds(2)));
}

TEST(ServerHealthLogTest, ALeavingServerIsSaidToLeaveOnceAndItsAbsenceIsExpected) {
  ServerHealthLog log;
  StreamFailure leaving{absl::UnavailableError("server shutting down"), /*left=*/true,
                        absl::Seconds(5)};
  std::optional<HealthLine> line = log.StreamFailed("a:1", leaving, kStart);
  ASSERT_TRUE(line.has_value());
  EXPECT_FALSE(line->warning);
  EXPECT_EQ(line->text,
            "data server a:1 is leaving (server shutting down); its batches go to the others");
  // Its other connection ends the same moment: said once.
  EXPECT_FALSE(log.StreamFailed("a:1", leaving, kStart + absl::Milliseconds(10)));
  // Unreachable after it left: expected for a minute, then a failure again.
  EXPECT_FALSE(log.StreamFailed("a:1", Failure("refused"), kStart + absl::Seconds(30)));
  EXPECT_TRUE(log.StreamFailed("a:1", Failure("refused"), kStart + absl::Seconds(61)));
}

TEST(ServerHealthLogTest, ARetryPeriodIsSaidAsTheConnectionWaits) {
  ServerHealthLog log;
  StreamFailure incompatible{absl::FailedPreconditionError("serves another dataset"),
                             /*left=*/false, absl::Seconds(30)};
  std::optional<HealthLine> line = log.StreamFailed("a:1", incompatible, kStart);
  ASSERT_TRUE(line.has_value());
  EXPECT_NE(line->text.find("every 30s at most"), std::string::npos) << line->text;
}

}  // namespace
}  // namespace heterodl
