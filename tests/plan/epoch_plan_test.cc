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

// 10 shards of 7..16 samples, in windows of 3.
PlanParams BlockParams(uint32_t world, uint32_t batch, bool drop_last) {
  PlanParams params = Params(0, world, batch, drop_last);
  for (uint64_t shard = 0; shard < 10; ++shard) {
    params.shard_sizes.push_back(7 + shard);
    params.num_samples += 7 + shard;
  }
  params.shuffle_block_shards = 3;
  return params;
}

// The shard of each sample of BlockParams().
std::vector<int> ShardOfSample(const PlanParams& params) {
  std::vector<int> shard_of;
  for (size_t shard = 0; shard < params.shard_sizes.size(); ++shard) {
    shard_of.insert(shard_of.end(), params.shard_sizes[shard], static_cast<int>(shard));
  }
  return shard_of;
}

TEST(EpochPlanTest, BlockShuffleReadsEachSampleOnceAcrossRanks) {
  const PlanParams params = BlockParams(3, 4, false);
  absl::StatusOr<EpochPlan> plan = EpochPlan::Create(params, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::map<int64_t, int> counts;
  for (uint32_t rank = 0; rank < 3; ++rank) {
    for (const int64_t index : plan->RankIndices(rank)) {
      ++counts[index];
    }
  }
  // 115 samples over 3 ranks: padded to 117 as DistributedSampler pads.
  ASSERT_EQ(counts.size(), params.num_samples);
  int repeated = 0;
  for (const auto& [index, count] : counts) {
    repeated += count - 1;
  }
  EXPECT_EQ(repeated, 2);
}

TEST(EpochPlanTest, BlockShuffleDrawsEachStretchFromAWindowOfShards) {
  const PlanParams params = BlockParams(1, 1, false);
  absl::StatusOr<EpochPlan> plan = EpochPlan::Create(params, 5);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::vector<int64_t> order = plan->RankIndices(0);
  const std::vector<int> shard_of = ShardOfSample(params);
  // Walk the order window by window: each window's samples are exactly
  // those of 3 shards (1 in the last), whole, and shuffled among them.
  size_t position = 0;
  std::set<int> shards_seen;
  int windows = 0;
  bool shuffled_within = false;
  while (position < order.size()) {
    std::set<int> window_shards;
    size_t window_samples = 0;
    // A window's shards are found from its samples; their sizes bound it.
    window_shards.insert(shard_of[order[position]]);
    size_t expected = 0;
    while (true) {
      expected = 0;
      for (const int shard : window_shards) {
        expected += params.shard_sizes[shard];
      }
      while (window_samples < expected) {
        window_shards.insert(shard_of[order[position + window_samples]]);
        ++window_samples;
      }
      size_t now = 0;
      for (const int shard : window_shards) {
        now += params.shard_sizes[shard];
      }
      if (now == expected) {
        break;
      }
    }
    EXPECT_EQ(window_shards.size(), windows < 3 ? 3u : 1u) << "window " << windows;
    for (const int shard : window_shards) {
      EXPECT_TRUE(shards_seen.insert(shard).second) << "shard " << shard << " in two windows";
    }
    if (!std::is_sorted(order.begin() + position, order.begin() + position + window_samples)) {
      shuffled_within = true;
    }
    position += window_samples;
    ++windows;
  }
  EXPECT_EQ(windows, 4);
  EXPECT_EQ(shards_seen.size(), 10u);
  EXPECT_TRUE(shuffled_within);
}

TEST(EpochPlanTest, BlockShufflePureFunctionOfSeedAndEpoch) {
  const PlanParams params = BlockParams(2, 8, true);
  PlanParams other_seed = params;
  other_seed.seed = 8;
  EXPECT_EQ(EpochPlan::Create(params, 1)->RankIndices(1),
            EpochPlan::Create(params, 1)->RankIndices(1));
  EXPECT_NE(EpochPlan::Create(params, 1)->RankIndices(1),
            EpochPlan::Create(params, 2)->RankIndices(1));
  EXPECT_NE(EpochPlan::Create(params, 1)->RankIndices(1),
            EpochPlan::Create(other_seed, 1)->RankIndices(1));
  // A window of every shard is a shuffle of the whole epoch, another than
  // the default plan's (its own streams).
  PlanParams whole = params;
  whole.shuffle_block_shards = 10;
  PlanParams plain = params;
  plain.shuffle_block_shards = 0;
  EXPECT_NE(EpochPlan::Create(whole, 1)->RankIndices(0),
            EpochPlan::Create(plain, 1)->RankIndices(0));
}

TEST(EpochPlanTest, TheDefaultPlanStaysAsItWas) {
  // Checkpoints name batches by number: a change of the default permutation
  // would make a resumed run read other samples. Values from the plan as
  // first written.
  absl::StatusOr<EpochPlan> plan = EpochPlan::Create(Params(1000, 2, 4, false), 3);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->BatchIndices(1, 0), (std::vector<int64_t>{440, 731, 647, 215}));
}

TEST(EpochPlanTest, RefusesABlockShuffleItCannotMake) {
  PlanParams no_shards = Params(100, 1, 4, false);
  no_shards.shuffle_block_shards = 2;
  EXPECT_EQ(EpochPlan::Create(no_shards, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(CheckBlockShuffle(no_shards).message().find("shards"), std::string::npos);

  PlanParams wrong_total = BlockParams(1, 4, false);
  wrong_total.num_samples += 1;
  EXPECT_FALSE(CheckBlockShuffle(wrong_total).ok());

  PlanParams sequential = BlockParams(1, 4, false);
  sequential.shuffle = false;
  EXPECT_FALSE(CheckBlockShuffle(sequential).ok());

  PlanParams huge = BlockParams(1, 4, false);
  huge.shuffle_block_shards = kMaxShuffleBlockShards + 1;
  EXPECT_FALSE(CheckBlockShuffle(huge).ok());
  EXPECT_TRUE(CheckBlockShuffle(BlockParams(1, 4, false)).ok());
}

// Indices that ranks [0, world) read from batch `from` of `plan` to its
// epoch's end.
std::multiset<int64_t> ReadFrom(const EpochPlan& plan, int64_t from) {
  std::multiset<int64_t> read;
  for (uint32_t rank = 0; rank < plan.params().world_size; ++rank) {
    for (int64_t k = from; k < plan.batches_per_rank(); ++k) {
      std::vector<int64_t> batch = plan.BatchIndices(rank, k);
      read.insert(batch.begin(), batch.end());
    }
  }
  return read;
}

// A run of `before` stopped after `next_batch` batches per rank and resumed
// as `after` (another world size or batch size): every sample of the epoch
// read exactly once, but for the padding each plan adds (DistributedSampler's
// repeats of its head), and the resumed plan's batches from one offset.
void ExpectResumedOnce(const PlanParams& before, int64_t next_batch, PlanParams after) {
  SCOPED_TRACE(::testing::Message()
               << "world " << before.world_size << "x" << before.batch_size << " batch "
               << next_batch << " -> world " << after.world_size << "x" << after.batch_size);
  absl::StatusOr<EpochPlan> first = EpochPlan::Create(before, 5);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<uint64_t> consumed = SamplesConsumed(before, next_batch);
  ASSERT_TRUE(consumed.ok()) << consumed.status();
  std::multiset<int64_t> read;
  for (uint32_t rank = 0; rank < before.world_size; ++rank) {
    for (int64_t k = 0; k < next_batch; ++k) {
      std::vector<int64_t> batch = first->BatchIndices(rank, k);
      read.insert(batch.begin(), batch.end());
    }
  }
  // Entries past the dataset's size are the first plan's padding.
  int64_t padding = std::max<int64_t>(0, static_cast<int64_t>(read.size() - before.num_samples));
  if (*consumed < before.num_samples) {
    after.epoch_offset = *consumed;
    absl::StatusOr<EpochPlan> rest = EpochPlan::Create(after, 5);
    ASSERT_TRUE(rest.ok()) << rest.status();
    std::multiset<int64_t> more = ReadFrom(*rest, 0);
    read.insert(more.begin(), more.end());
    padding += rest->samples_per_rank() * after.world_size -
               static_cast<int64_t>(before.num_samples - *consumed);
  }
  std::set<int64_t> distinct(read.begin(), read.end());
  EXPECT_EQ(distinct.size(), before.num_samples);
  EXPECT_EQ(static_cast<int64_t>(read.size() - distinct.size()), padding);
}

TEST(EpochPlanTest, AResumeAtAnotherWorldSizeReadsTheRestOnce) {
  for (const uint32_t new_world : {3u, 4u, 6u, 1u}) {
    // The same per-rank batch, and the same global batch where it divides.
    ExpectResumedOnce(Params(960, 4, 8, false), 7, Params(960, new_world, 8, false));
    ExpectResumedOnce(Params(960, 4, 8, false), 7, Params(960, new_world, 32 / new_world, false));
    // A dataset that pads under both world sizes, stopped at batch 0 and at
    // the last batch (whose samples are partly padding).
    ExpectResumedOnce(Params(1001, 4, 8, false), 0, Params(1001, new_world, 8, false));
    ExpectResumedOnce(Params(1001, 4, 8, false), 31, Params(1001, new_world, 8, false));
    ExpectResumedOnce(Params(1001, 4, 8, false), 32, Params(1001, new_world, 8, false));
  }
}

TEST(EpochPlanTest, AResumedPlanIsTheSamePermutationFromItsOffset) {
  PlanParams before = Params(1000, 4, 8, false);
  absl::StatusOr<EpochPlan> whole = EpochPlan::Create(before, 2);
  ASSERT_TRUE(whole.ok());
  PlanParams after = Params(1000, 1, 10, false);
  after.epoch_offset = 800;  // batches [0, 25) of 4 ranks of 8
  absl::StatusOr<EpochPlan> rest = EpochPlan::Create(after, 2);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest->samples_per_rank(), 200);
  // One rank reads the permutation in order: the 4 ranks' batch 25 first.
  std::vector<int64_t> expected;
  for (int64_t j = 200; j < 203; ++j) {
    for (uint32_t rank = 0; rank < 4; ++rank) {
      expected.push_back(whole->RankIndices(rank)[j]);
    }
  }
  std::vector<int64_t> first = rest->BatchIndices(0, 0);
  std::vector<int64_t> second = rest->BatchIndices(0, 1);
  first.insert(first.end(), second.begin(), second.begin() + 2);
  EXPECT_EQ(first, expected);
  EXPECT_EQ(*SamplesConsumed(before, 25), 800u);
  // A state saved inside the resumed epoch composes: its offset plus what
  // its own batches read.
  EXPECT_EQ(*SamplesConsumed(after, 3), 830u);
  EXPECT_EQ(*SamplesConsumed(after, 20), 1000u);
}

TEST(EpochPlanTest, AResumeWithDropLastDropsOnlyWhatTheNewWorldCannotSplit) {
  PlanParams after = Params(1000, 3, 8, true);
  after.epoch_offset = 500;
  absl::StatusOr<EpochPlan> rest = EpochPlan::Create(after, 0);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest->samples_per_rank(), 166);  // 500 over 3, 2 left out
  EXPECT_EQ(rest->batches_per_rank(), 20);   // 166 / 8, the short batch dropped
  std::multiset<int64_t> read = ReadFrom(*rest, 0);
  EXPECT_EQ(std::set<int64_t>(read.begin(), read.end()).size(), read.size());
}

TEST(EpochPlanTest, RefusesAnOffsetPastTheEpoch) {
  PlanParams params = Params(100, 2, 4, false);
  params.epoch_offset = 100;
  EXPECT_EQ(EpochPlan::Create(params, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(SamplesPerRank(params).ok());
  EXPECT_FALSE(SamplesConsumed(Params(100, 2, 4, false), 14).ok());
  EXPECT_EQ(*SamplesConsumed(Params(100, 2, 4, false), 13), 100u);
}

}  // namespace
}  // namespace heterodl
