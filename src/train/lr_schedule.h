// The learning rate at each step: linear warmup, then constant or a cosine
// decay to zero at the last step (SGDR without restarts). Pure arithmetic,
// so resuming at step s gives exactly the rate an uninterrupted run had.
//
//   LrSchedule schedule{.base = 0.1, .warmup_steps = 500, .total_steps = 10000,
//                       .kind = LrSchedule::Kind::kCosine};
//   double lr = schedule.At(step);
#ifndef HETERODL_SRC_TRAIN_LR_SCHEDULE_H_
#define HETERODL_SRC_TRAIN_LR_SCHEDULE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace heterodl {

struct LrSchedule {
  enum class Kind { kConstant, kCosine };

  double base = 0.05;
  // Steps 0..warmup_steps-1 ramp linearly from base/warmup_steps to base.
  int64_t warmup_steps = 0;
  // The cosine reaches zero here; steps beyond stay at zero.
  int64_t total_steps = 1;
  Kind kind = Kind::kCosine;

  double At(int64_t step) const;
};

// "constant" or "cosine"; INVALID_ARGUMENT otherwise.
absl::StatusOr<LrSchedule::Kind> ParseLrScheduleKind(const std::string& name);

}  // namespace heterodl

#endif  // HETERODL_SRC_TRAIN_LR_SCHEDULE_H_
