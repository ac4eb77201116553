#include "src/plan/epoch_plan.h"

#include <algorithm>
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
  const uint64_t n = params.num_samples;
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

absl::StatusOr<EpochPlan> EpochPlan::Create(const PlanParams& params, uint32_t epoch) {
  EpochPlan plan;
  plan.params_ = params;
  plan.epoch_ = epoch;
  ASSIGN_OR_RETURN(plan.samples_per_rank_, SamplesPerRank(params));
  ASSIGN_OR_RETURN(plan.batches_per_rank_, BatchesPerRank(params));

  const int64_t n = static_cast<int64_t>(params.num_samples);
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  if (params.shuffle) {
    // Fisher-Yates driven by the epoch's own counter-based stream.
    CounterRng rng(params.seed, {kStreamEpochPermutation, epoch, 0});
    for (int64_t i = n - 1; i > 0; --i) {
      std::swap(order[i], order[rng.Below(static_cast<uint64_t>(i) + 1)]);
    }
  }
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
