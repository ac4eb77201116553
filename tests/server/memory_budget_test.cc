#include "src/server/memory_budget.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "src/common/process/process_stats.h"

namespace heterodl {
namespace {

// Grants handed out, by name, in the order they came.
struct Granted {
  std::vector<std::string> order;
  std::vector<std::pair<std::string, MemoryBudget::Grant>> grants;

  MemoryBudget::Ready For(const std::string& name) {
    return [this, name](MemoryBudget::Grant grant) {
      order.push_back(name + (grant.bytes() == 0 ? " cancelled" : ""));
      grants.emplace_back(name, std::move(grant));
    };
  }
  void Release(const std::string& name) {
    for (auto& [granted, grant] : grants) {
      if (granted == name) {
        grant.Reset();
      }
    }
  }
};

TEST(MemoryBudgetTest, ReservationsThatFitAreGrantedAtOnce) {
  auto budget = MemoryBudget::Create(100);
  Granted granted;
  budget->Reserve(60, nullptr, granted.For("a"));
  budget->Reserve(40, nullptr, granted.For("b"));
  EXPECT_EQ(granted.order, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(budget->GetStats().reserved, 100u);
  granted.grants.clear();
  const MemoryBudget::Stats stats = budget->GetStats();
  EXPECT_EQ(stats.reserved, 0u);
  EXPECT_EQ(stats.peak_reserved, 100u);
  EXPECT_EQ(stats.waited, 0u);
}

TEST(MemoryBudgetTest, OneThatDoesNotFitWaitsForARelease) {
  absl::Time now = absl::UnixEpoch();
  auto budget = MemoryBudget::Create(100, [&now] { return now; });
  Granted granted;
  const int stream = 0;
  budget->Reserve(70, &stream, granted.For("a"));
  budget->Reserve(50, &stream, granted.For("b"));
  EXPECT_EQ(granted.order, (std::vector<std::string>{"a"}));
  now += absl::Seconds(3);
  MemoryBudget::Stats stats = budget->GetStats();
  EXPECT_EQ(stats.waiting, 1);
  EXPECT_EQ(stats.waited, 1u);
  EXPECT_EQ(stats.longest_wait, absl::Seconds(3));
  granted.Release("a");
  EXPECT_EQ(granted.order, (std::vector<std::string>{"a", "b"}));
  stats = budget->GetStats();
  EXPECT_EQ(stats.reserved, 50u);
  EXPECT_EQ(stats.waiting, 0);
  EXPECT_EQ(stats.longest_wait, absl::ZeroDuration());
}

TEST(MemoryBudgetTest, WaitersAreServedFirstComeFirstServed) {
  auto budget = MemoryBudget::Create(100);
  Granted granted;
  budget->Reserve(90, nullptr, granted.For("a"));
  budget->Reserve(60, nullptr, granted.For("big"));
  // Would fit beside "a", but "big" asked first and is not passed over.
  budget->Reserve(10, nullptr, granted.For("small"));
  EXPECT_EQ(granted.order, (std::vector<std::string>{"a"}));
  granted.Release("a");
  EXPECT_EQ(granted.order, (std::vector<std::string>{"a", "big", "small"}));
}

TEST(MemoryBudgetTest, CancellingAStreamsWaitersHandsThemNothingAndLetsOthersIn) {
  auto budget = MemoryBudget::Create(100);
  Granted granted;
  const int first = 0;
  const int second = 0;
  budget->Reserve(90, &first, granted.For("a"));
  budget->Reserve(60, &first, granted.For("b"));
  budget->Reserve(10, &second, granted.For("c"));
  budget->CancelWaiting(&first);
  EXPECT_EQ(granted.order, (std::vector<std::string>{"a", "b cancelled", "c"}));
  EXPECT_EQ(budget->GetStats().reserved, 100u);
  EXPECT_EQ(budget->GetStats().waiting, 0);
}

TEST(MemoryBudgetTest, ClosingCancelsWaitersAndLaterReleasesStartNothing) {
  auto budget = MemoryBudget::Create(100);
  Granted granted;
  budget->Reserve(100, nullptr, granted.For("a"));
  budget->Reserve(50, nullptr, granted.For("b"));
  budget->Close();
  EXPECT_EQ(granted.order, (std::vector<std::string>{"a", "b cancelled"}));
  budget->Reserve(10, nullptr, granted.For("c"));
  granted.Release("a");
  EXPECT_EQ(granted.order, (std::vector<std::string>{"a", "b cancelled", "c cancelled"}));
  EXPECT_EQ(budget->GetStats().reserved, 0u);
}

TEST(MemoryBudgetTest, ARequestOverTheCapacityNeverFits) {
  auto budget = MemoryBudget::Create(uint64_t{64} << 20);
  EXPECT_TRUE(budget->Fits(uint64_t{64} << 20).ok());
  const absl::Status status = budget->Fits(uint64_t{65} << 20);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("65 MiB"), std::string::npos) << status;
  EXPECT_NE(status.message().find("--max-memory-mb"), std::string::npos) << status;
}

TEST(MemoryBudgetTest, GrantsMayOutliveTheirCreatorsReference) {
  MemoryBudget::Grant grant;
  {
    auto budget = MemoryBudget::Create(10);
    budget->Reserve(10, nullptr, [&grant](MemoryBudget::Grant g) { grant = std::move(g); });
  }
  EXPECT_EQ(grant.bytes(), 10u);
  grant.Reset();  // the budget lives until here
  EXPECT_EQ(grant.bytes(), 0u);
}

TEST(MemoryBudgetTest, TheDefaultIsHalfOfWhatThisProcessMayUse) {
  const uint64_t budget = DefaultMemoryBudgetBytes();
  EXPECT_GT(budget, uint64_t{64} << 20);
  EXPECT_LE(budget, UsableMemoryBytes() / 2 + 1);
}

}  // namespace
}  // namespace heterodl
