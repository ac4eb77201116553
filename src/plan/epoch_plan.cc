#include "src/plan/epoch_plan.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/common/counter_rng.h"
#include "src/common/status_macros.h"

namespace heterodl {

absl::StatusOr<int64_t> SamplesPerRank(const PlanParams& params) {
  if (params.num_samples == 0) {
    return absl::InvalidArgumentError("empty dataset");
  }
  if (params.world_size == 0) {
    return absl::InvalidArgumentError("world_size must be > 0");
  }
  if (params.batch_size == 0) {
    return absl::InvalidArgumentError("batch_size must be > 0");
  }
  if (params.epoch_offset >= params.num_samples) {
    return absl::InvalidArgumentError(absl::StrCat("an epoch offset of ", params.epoch_offset,
                                                   " leaves nothing of the ", params.num_samples,
                                                   " samples"));
  }
  const uint64_t n = params.num_samples - params.epoch_offset;
  const uint64_t world = params.world_size;
  if (params.drop_last) {
    if (n < world) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dataset of ", n, " samples is smaller than world_size ", world, " with drop_last"));
    }
    return static_cast<int64_t>(n / world);
  }
  return static_cast<int64_t>((n + world - 1) / world);
}

absl::StatusOr<int64_t> BatchesPerRank(const PlanParams& params) {
  ASSIGN_OR_RETURN(int64_t per_rank, SamplesPerRank(params));
  const int64_t batch = params.batch_size;
  return params.drop_last ? per_rank / batch : (per_rank + batch - 1) / batch;
}

absl::StatusOr<int64_t> SamplesInBatch(const PlanParams& params, int64_t k) {
  ASSIGN_OR_RETURN(int64_t per_rank, SamplesPerRank(params));
  const int64_t begin = k * params.batch_size;
  return std::max<int64_t>(0, std::min<int64_t>(params.batch_size, per_rank - begin));
}

absl::StatusOr<uint64_t> SamplesConsumed(const PlanParams& params, int64_t next_batch) {
  ASSIGN_OR_RETURN(const int64_t batches, BatchesPerRank(params));
  if (next_batch < 0 || next_batch > batches) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch ", next_batch, " outside the epoch's ", batches, " batches"));
  }
  if (next_batch == batches) {
    return params.num_samples;
  }
  // Only a rank's last batch is short: before it, every rank's batches are
  // whole, and rank r's j-th sample is entry r + j * world_size.
  const uint64_t read = static_cast<uint64_t>(next_batch) * params.batch_size * params.world_size;
  return std::min(params.num_samples, params.epoch_offset + read);
}

absl::Status CheckBlockShuffle(const PlanParams& params) {
  if (params.shuffle_block_shards == 0) {
    return absl::OkStatus();
  }
  if (!params.shuffle) {
    return absl::InvalidArgumentError(
        "a block shuffle is a shuffle: it cannot be asked for with shuffle off");
  }
  if (params.shuffle_block_shards > kMaxShuffleBlockShards) {
    return absl::InvalidArgumentError(absl::StrCat("a block shuffle over ",
                                                   params.shuffle_block_shards,
                                                   " shards, more than ", kMaxShuffleBlockShards));
  }
  if (params.shard_sizes.empty()) {
    return absl::InvalidArgumentError(
        "a block shuffle needs a dataset of shards (tar shards or TFRecord files); this one has "
        "none");
  }
  uint64_t total = 0;
  for (const uint64_t size : params.shard_sizes) {
    total += size;
  }
  if (total != params.num_samples) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard sizes sum to ", total, " samples, not the dataset's ", params.num_samples));
  }
  return absl::OkStatus();
}

namespace {

// Fisher-Yates over `order`, driven by the counter-based stream `counter`.
void Shuffle(std::vector<int64_t>& order, uint64_t seed, std::array<uint32_t, 3> counter) {
  CounterRng rng(seed, counter);
  for (int64_t i = static_cast<int64_t>(order.size()) - 1; i > 0; --i) {
    std::swap(order[i], order[rng.Below(static_cast<uint64_t>(i) + 1)]);
  }
}

// The block shuffle's order (see the header): shards permuted, then the
// samples of each window of params.shuffle_block_shards shards shuffled
// among themselves. REQUIRES: CheckBlockShuffle(params) is OK.
std::vector<int64_t> BlockShuffledOrder(const PlanParams& params, uint32_t epoch) {
  const size_t shards = params.shard_sizes.size();
  std::vector<int64_t> first(shards);  // each shard's first sample
  int64_t next = 0;
  for (size_t i = 0; i < shards; ++i) {
    first[i] = next;
    next += static_cast<int64_t>(params.shard_sizes[i]);
  }
  std::vector<int64_t> shard_order(shards);
  std::iota(shard_order.begin(), shard_order.end(), 0);
  Shuffle(shard_order, params.seed, {kStreamShardPermutation, epoch, 0});

  std::vector<int64_t> order;
  order.reserve(params.num_samples);
  std::vector<int64_t> window;
  const size_t window_shards = params.shuffle_block_shards;
  for (size_t begin = 0; begin < shards; begin += window_shards) {
    window.clear();
    for (size_t i = begin; i < std::min(shards, begin + window_shards); ++i) {
      const int64_t shard = shard_order[i];
      for (uint64_t j = 0; j < params.shard_sizes[shard]; ++j) {
        window.push_back(first[shard] + static_cast<int64_t>(j));
      }
    }
    Shuffle(window, params.seed,
            {kStreamShardWindowShuffle, epoch, static_cast<uint32_t>(begin / window_shards)});
    order.insert(order.end(), window.begin(), window.end());
  }
  return order;
}

}  // namespace

absl::StatusOr<EpochPlan> EpochPlan::Create(const PlanParams& params, uint32_t epoch) {
  EpochPlan plan;
  plan.params_ = params;
  plan.epoch_ = epoch;
  ASSIGN_OR_RETURN(plan.samples_per_rank_, SamplesPerRank(params));
  ASSIGN_OR_RETURN(plan.batches_per_rank_, BatchesPerRank(params));

  RETURN_IF_ERROR(CheckBlockShuffle(params));

  std::vector<int64_t> order;
  if (params.shuffle_block_shards > 0) {
    order = BlockShuffledOrder(params, epoch);
  } else {
    order.resize(params.num_samples);
    std::iota(order.begin(), order.end(), 0);
    if (params.shuffle) {
      Shuffle(order, params.seed, {kStreamEpochPermutation, epoch, 0});
    }
  }
  if (params.epoch_offset > 0) {
    order.erase(order.begin(), order.begin() + static_cast<int64_t>(params.epoch_offset));
  }
  const auto n = static_cast<int64_t>(order.size());
  const int64_t total = plan.samples_per_rank_ * params.world_size;
  if (total <= n) {
    order.resize(total);
  } else {
    order.reserve(total);
    for (int64_t i = 0; static_cast<int64_t>(order.size()) < total; ++i) {
      order.push_back(order[i % n]);
    }
  }
  plan.order_ = std::move(order);
  return plan;
}

std::vector<int64_t> EpochPlan::BatchIndices(uint32_t rank, int64_t k) const {
  const int64_t begin = k * params_.batch_size;
  const int64_t end = std::min<int64_t>(begin + params_.batch_size, samples_per_rank_);
  std::vector<int64_t> indices;
  indices.reserve(std::max<int64_t>(0, end - begin));
  for (int64_t i = begin; i < end; ++i) {
    indices.push_back(order_[rank + i * params_.world_size]);
  }
  return indices;
}

std::vector<int64_t> EpochPlan::RankIndices(uint32_t rank) const {
  std::vector<int64_t> indices;
  for (int64_t k = 0; k < batches_per_rank_; ++k) {
    std::vector<int64_t> batch = BatchIndices(rank, k);
    indices.insert(indices.end(), batch.begin(), batch.end());
  }
  return indices;
}

}  // namespace heterodl
