// Training checkpoints: model parameters and buffers, optimizer state, and
// where training stands (global step, epoch, next batch of that epoch), so a
// resumed run continues at exactly the batch an uninterrupted run would have
// trained on next. Internal to src/train (LibTorch).
//
//   RETURN_IF_ERROR(SaveCheckpoint(dir, *model, optimizer, state));   // rank 0
//   ASSIGN_OR_RETURN(std::optional<TrainingState> state,
//                    LoadCheckpoint(dir, *model, optimizer));         // every rank
#ifndef HETERODL_SRC_TRAIN_CHECKPOINT_H_
#define HETERODL_SRC_TRAIN_CHECKPOINT_H_

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "src/train/models.h"

namespace heterodl {

struct TrainingState {
  int64_t step = 0;        // steps completed
  uint32_t epoch = 0;      // epoch of the next batch
  int64_t next_batch = 0;  // within `epoch`
  // The plan `next_batch` is a batch of, so that a run at another world size
  // or batch size can tell which samples of `epoch` were trained on
  // (SamplesConsumed): its ranks and per-rank batch (0 in a checkpoint
  // written before they were saved: this run's), and, when `epoch` is the
  // rest of one begun at another world size, the entries of the epoch's
  // permutation it leaves out and the number of its first batch.
  uint32_t world_size = 0;
  uint32_t batch_size = 0;
  uint64_t epoch_offset = 0;
  int64_t first_batch = 0;
  // What the epochs' permutations are made of: a run of another one cannot
  // take the position (saved with world_size).
  uint64_t dataset_fingerprint = 0;
  uint64_t seed = 0;
  bool drop_last = false;
  bool shuffle = true;
  // --shuffle-block-shards; unknown in a checkpoint written before it was
  // saved (then not compared).
  std::optional<uint32_t> shuffle_block_shards;
};

// Writes DIR/checkpoint.pt (through a temporary file and a rename, so a
// crash mid-write leaves the previous checkpoint intact). Errors name the
// path.
absl::Status SaveCheckpoint(const std::string& dir, Model& model,
                            torch::optim::Optimizer& optimizer, const TrainingState& state);

// Restores DIR/checkpoint.pt into `model` and `optimizer`; nullopt when there
// is none. INVALID_ARGUMENT when it does not fit the model (another
// architecture or number of classes), naming the file.
absl::StatusOr<std::optional<TrainingState>> LoadCheckpoint(const std::string& dir, Model& model,
                                                            torch::optim::Optimizer& optimizer);

}  // namespace heterodl

#endif  // HETERODL_SRC_TRAIN_CHECKPOINT_H_
