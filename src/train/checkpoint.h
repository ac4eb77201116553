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
