#include "src/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace heterodl {

double LrSchedule::At(int64_t step) const {
  if (step < warmup_steps) {
    return base * static_cast<double>(step + 1) / warmup_steps;
  }
  if (kind == Kind::kConstant) {
    return base;
  }
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps);
  const double progress =
      std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps));
  return base * 0.5 * (1.0 + std::cos(M_PI * progress));
}

absl::StatusOr<LrSchedule::Kind> ParseLrScheduleKind(const std::string& name) {
  if (name == "constant") {
    return LrSchedule::Kind::kConstant;
  }
  if (name == "cosine") {
    return LrSchedule::Kind::kCosine;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--lr-schedule must be one of constant, cosine; got '", name, "'"));
}

}  // namespace heterodl
