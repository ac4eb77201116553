// EpochPlan: which dataset samples form batch k of rank r in an epoch.
//
// A pure function of (fingerprint, seed, epoch, world_size, batch_size,
// drop_last, epoch_offset): a seeded permutation of the dataset, split across ranks the way
// PyTorch's DistributedSampler does (rank r takes every world_size-th index
// starting at r; without drop_last the permutation is padded by repeating its
// head so every rank gets the same count; with drop_last the tail is cut),
// then cut into batches the way DataLoader does.
//
// The permutation is either over all samples (the default) or, for
// datasets of shards read from object storage, block-shuffled: the shards
// are permuted, and samples are shuffled within windows of K consecutive
// shards of that permutation (MosaicML Streaming's py1b), so that the
// batches of a stretch of the epoch need the samples of K shards only and a
// server can read those shards in large chunks (docs/object_storage.md has
// the model of requests, bytes and memory). Still a pure function, and each
// sample once per epoch.
//
//   ASSIGN_OR_RETURN(EpochPlan plan, EpochPlan::Create(params, /*epoch=*/3));
//   for (int64_t k = 0; k < plan.batches_per_rank(); ++k)
//     std::vector<int64_t> indices = plan.BatchIndices(rank, k);
#ifndef HETERODL_SRC_PLAN_EPOCH_PLAN_H_
#define HETERODL_SRC_PLAN_EPOCH_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace heterodl {

// The largest epoch number servers build batches of (RequestLimits) and
// loaders ask for.
inline constexpr uint32_t kMaxEpoch = 1'000'000;

struct PlanParams {
  uint64_t num_samples = 0;
  uint64_t seed = 0;
  uint32_t world_size = 1;
  uint32_t batch_size = 1;
  bool drop_last = false;
  // Whether the order is permuted; false keeps dataset order (evaluation).
  bool shuffle = true;
  // > 0: the block shuffle, over windows of this many shards (a shuffle:
  // `shuffle` must be true). 0: every sample permuted at once.
  uint32_t shuffle_block_shards = 0;
  // With a block shuffle: the samples of each shard, in dataset order
  // (shard i's samples follow shard i-1's); they sum to num_samples.
  std::vector<uint64_t> shard_sizes;
  // > 0: every epoch of this plan is the rest of one that a run at another
  // world size or batch size began (a resume): the first `epoch_offset`
  // entries of the epoch's permutation were read already and are left out,
  // and the rest is split over this plan's ranks as a whole epoch would be
  // (padded by repeating its own head, or cut with drop_last). Must be below
  // num_samples.
  uint64_t epoch_offset = 0;
};

// The entries of an epoch's permutation that batches [0, next_batch) of
// every rank of `params` hold: where the rest of the epoch starts for a
// plan at another world size or batch size (its epoch_offset). All of them
// (num_samples) once next_batch reaches the epoch's end, or once the
// padding that repeats the head is reached.
// InvalidArgument when `params` make no plan or next_batch is past the end.
absl::StatusOr<uint64_t> SamplesConsumed(const PlanParams& params, int64_t next_batch);

// The shards a window of a block shuffle may span, at most.
inline constexpr uint32_t kMaxShuffleBlockShards = 1 << 16;

// OK unless `params` ask for a block shuffle that cannot be made: without
// shards (a dataset that is no tar shards or TFRecord files), shard sizes
// that do not sum to the dataset, a window of more than
// kMaxShuffleBlockShards, or a sequential plan. INVALID_ARGUMENT saying which.
absl::Status CheckBlockShuffle(const PlanParams& params);

// Samples each rank gets per epoch (DistributedSampler's num_samples: the
// dataset padded up, or with drop_last cut down, to a multiple of the world).
// InvalidArgument for zero sizes or a dataset too small for the world.
absl::StatusOr<int64_t> SamplesPerRank(const PlanParams& params);

// Batches each rank gets per epoch, without building the permutation.
// InvalidArgument for zero sizes or a dataset too small for the world.
absl::StatusOr<int64_t> BatchesPerRank(const PlanParams& params);

// Samples in batch `k` of any rank (the last one may be short), without
// building the permutation. REQUIRES: 0 <= k < BatchesPerRank(params).
absl::StatusOr<int64_t> SamplesInBatch(const PlanParams& params, int64_t k);

class EpochPlan {
 public:
  static absl::StatusOr<EpochPlan> Create(const PlanParams& params, uint32_t epoch);

  uint32_t epoch() const { return epoch_; }
  const PlanParams& params() const { return params_; }
  int64_t samples_per_rank() const { return samples_per_rank_; }
  int64_t batches_per_rank() const { return batches_per_rank_; }

  // Dataset indices of batch `k` of `rank`, in order. The last batch may be
  // short when drop_last is false. REQUIRES: rank < world_size,
  // k < batches_per_rank() (callers validate untrusted ids first).
  std::vector<int64_t> BatchIndices(uint32_t rank, int64_t k) const;

  // All indices `rank` sees this epoch, in order.
  std::vector<int64_t> RankIndices(uint32_t rank) const;

 private:
  EpochPlan() = default;

  PlanParams params_;
  uint32_t epoch_ = 0;
  int64_t samples_per_rank_ = 0;
  int64_t batches_per_rank_ = 0;
  // Padded or truncated to samples_per_rank_ * world_size entries.
  std::vector<int64_t> order_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_PLAN_EPOCH_PLAN_H_
