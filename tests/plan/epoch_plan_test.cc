#include "src/plan/epoch_plan.h"

#include <algorithm>
#include <map>
#include <set>

#include "gtest/gtest.h"

namespace heterodl {
namespace {

PlanParams Params(uint64_t n, uint32_t world, uint32_t batch, bool drop_last) {
  PlanParams params;
  params.num_samples = n;
  params.seed = 7;
  params.world_size = world;
  params.batch_size = batch;
  params.drop_last = drop_last;
  return params;
}

TEST(EpochPlanTest, RanksPartitionTheEpochWhenDivisible) {
  absl::StatusOr<EpochPlan> plan = EpochPlan::Create(Params(120, 3, 8, false), 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::multiset<int64_t> seen;
  for (uint32_t rank = 0; rank < 3; ++rank) {
    std::vector<int64_t> indices = plan->RankIndices(rank);
    EXPECT_EQ(indices.size(), 40u);
    seen.insert(indices.begin(), indices.end());
  }
  ASSERT_EQ(seen.size(), 120u);
  for (int64_t i = 0; i < 120; ++i) {
    EXPECT_EQ(seen.count(i), 1u) << i;
  }
}

TEST(EpochPlanTest, PadsLikeDistributedSamplerWithoutDropLast) {
  // 10 samples over 4 ranks: 3 each, the first 2 of the permutation repeated.
  absl::StatusOr<EpochPlan> plan = EpochPlan::Create(Params(10, 4, 2, false), 0);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->samples_per_rank(), 3);
  EXPECT_EQ(plan->batches_per_rank(), 2);
  EXPECT_EQ(plan->BatchIndices(0, 1).size(), 1u);  // short last batch
  std::map<int64_t, int> counts;
  for (uint32_t rank = 0; rank < 4; ++rank) {
    for (int64_t index : plan->RankIndices(rank)) {
      counts[index]++;
    }
  }
  EXPECT_EQ(counts.size(), 10u);  // every sample at least once
  int repeated = 0;
  for (auto [index, count] : counts) {
    repeated += count - 1;
  }
  EXPECT_EQ(repeated, 2);
}

TEST(EpochPlanTest, DropLastTruncates) {
  absl::StatusOr<EpochPlan> plan = EpochPlan::Create(Params(10, 4, 2, true), 0);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->samples_per_rank(), 2);
  EXPECT_EQ(plan->batches_per_rank(), 1);
  std::set<int64_t> seen;
  for (uint32_t rank = 0; rank < 4; ++rank) {
    for (int64_t index : plan->RankIndices(rank)) {
      EXPECT_TRUE(seen.insert(index).second);
    }
  }
  EXPECT_EQ(seen.size(), 8u);
}

TEST(EpochPlanTest, PureFunctionOfItsInputs) {
  absl::StatusOr<EpochPlan> a = EpochPlan::Create(Params(1000, 2, 16, false), 3);
  absl::StatusOr<EpochPlan> b = EpochPlan::Create(Params(1000, 2, 16, false), 3);
  absl::StatusOr<EpochPlan> other_epoch = EpochPlan::Create(Params(1000, 2, 16, false), 4);
  PlanParams other_seed_params = Params(1000, 2, 16, false);
  other_seed_params.seed = 8;
  absl::StatusOr<EpochPlan> other_seed = EpochPlan::Create(other_seed_params, 3);
  EXPECT_EQ(a->RankIndices(1), b->RankIndices(1));
  EXPECT_NE(a->RankIndices(1), other_epoch->RankIndices(1));
  EXPECT_NE(a->RankIndices(1), other_seed->RankIndices(1));
}

TEST(EpochPlanTest, ShuffledButComplete) {
  absl::StatusOr<EpochPlan> plan = EpochPlan::Create(Params(500, 1, 500, false), 0);
  std::vector<int64_t> indices = plan->RankIndices(0);
  std::vector<int64_t> sorted = indices;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 500; ++i) {
    ASSERT_EQ(sorted[i], i);
  }
  EXPECT_NE(indices, sorted);
}

TEST(EpochPlanTest, NoShuffleKeepsDatasetOrder) {
  PlanParams params = Params(6, 2, 3, false);
  params.shuffle = false;
  absl::StatusOr<EpochPlan> plan = EpochPlan::Create(params, 0);
  EXPECT_EQ(plan->RankIndices(0), (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(plan->RankIndices(1), (std::vector<int64_t>{1, 3, 5}));
}

TEST(EpochPlanTest, RejectsBadParameters) {
  EXPECT_FALSE(EpochPlan::Create(Params(0, 1, 1, false), 0).ok());
  EXPECT_FALSE(EpochPlan::Create(Params(10, 0, 1, false), 0).ok());
  EXPECT_FALSE(EpochPlan::Create(Params(10, 1, 0, false), 0).ok());
  EXPECT_FALSE(EpochPlan::Create(Params(3, 4, 1, true), 0).ok());
}

}  // namespace
}  // namespace heterodl
