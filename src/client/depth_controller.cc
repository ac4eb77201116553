#include "src/client/depth_controller.h"

#include <algorithm>
#include <cmath>

namespace heterodl {
namespace {

// Weight of a new measurement in the moving averages: about the last ten
// batches count.
constexpr double kSmoothing = 0.2;
constexpr double kHeadroom = 1.5;
// A build shorter than this (a synthetic dataset's, say) counts as this, so
// the ratio stays finite; the ceiling then decides.
constexpr absl::Duration kShortestBuild = absl::Microseconds(50);

absl::Duration Smooth(absl::Duration average, absl::Duration sample) {
  return average + kSmoothing * (sample - average);
}

}  // namespace

DepthController::DepthController(DepthLimits limits) : limits_(limits) {
  limits_.min_depth = std::max(1, limits_.min_depth);
  limits_.max_depth = std::max(limits_.min_depth, limits_.max_depth);
}

void DepthController::Observe(absl::Duration round_trip, absl::Duration queued,
                              absl::Duration built) {
  round_trip = std::max(round_trip, absl::ZeroDuration());
  queued = std::clamp(queued, absl::ZeroDuration(), round_trip);
  built = std::clamp(built, absl::ZeroDuration(), round_trip - queued);
  const absl::Duration transit = round_trip - queued - built;
  if (!measured_) {
    transit_ = transit;
    build_ = built;
    measured_ = true;
    return;
  }
  transit_ = Smooth(transit_, transit);
  build_ = Smooth(build_, built);
}

void DepthController::SetMaxDepth(int max_depth) {
  limits_.max_depth = std::max(limits_.min_depth, max_depth);
}

int DepthController::depth() const {
  if (!measured_) {
    return std::clamp(limits_.initial_depth, limits_.min_depth, limits_.max_depth);
  }
  const double in_transit =
      absl::FDivDuration(transit_, std::max(build_, kShortestBuild)) * kHeadroom;
  // Computed in double: a huge ratio must clamp, not overflow an int.
  const double wanted = 2 + std::ceil(in_transit);
  return static_cast<int>(std::clamp<double>(wanted, limits_.min_depth, limits_.max_depth));
}

}  // namespace heterodl
