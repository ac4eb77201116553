#include "augment/boxes.h"

#include <algorithm>
#include <utility>

namespace heterodl {
namespace {

// The hull of `box`'s four corners mapped by `affine`.
Box Mapped(const Box& box, const Affine& affine) {
  const double xs[4] = {box.x1, box.x2, box.x1, box.x2};
  const double ys[4] = {box.y1, box.y1, box.y2, box.y2};
  double x_low = 0;
  double x_high = 0;
  double y_low = 0;
  double y_high = 0;
  for (int i = 0; i < 4; ++i) {
    const double x = affine(0, 0) * xs[i] + affine(0, 1) * ys[i] + affine(0, 2);
    const double y = affine(1, 0) * xs[i] + affine(1, 1) * ys[i] + affine(1, 2);
    x_low = i == 0 ? x : std::min(x_low, x);
    x_high = i == 0 ? x : std::max(x_high, x);
    y_low = i == 0 ? y : std::min(y_low, y);
    y_high = i == 0 ? y : std::max(y_high, y);
  }
  return {static_cast<float>(x_low), static_cast<float>(y_low), static_cast<float>(x_high),
          static_cast<float>(y_high)};
}

double Area(const Box& box) {
  return std::max(0.0f, box.width()) * static_cast<double>(std::max(0.0f, box.height()));
}

}  // namespace

Affine IdentityAffine() { return {1, 0, 0, 0, 1, 0}; }

Affine ScalingAffine(cv::Size from, cv::Size to) {
  return {static_cast<double>(to.width) / from.width,   0, 0, 0,
          static_cast<double>(to.height) / from.height, 0};
}

Affine TranslationAffine(double dx, double dy) { return {1, 0, dx, 0, 1, dy}; }

Affine ThenAffine(const Affine& first, const Affine& second) {
  const cv::Matx33d a(first(0, 0), first(0, 1), first(0, 2), first(1, 0), first(1, 1), first(1, 2),
                      0, 0, 1);
  const cv::Matx33d b(second(0, 0), second(0, 1), second(0, 2), second(1, 0), second(1, 1),
                      second(1, 2), 0, 0, 1);
  const cv::Matx33d c = b * a;
  return {c(0, 0), c(0, 1), c(0, 2), c(1, 0), c(1, 1), c(1, 2)};
}

MovingBoxes::MovingBoxes(std::vector<Box> boxes) : clipped_(boxes), unclipped_(std::move(boxes)) {}

void MovingBoxes::Move(const Affine& affine, cv::Size output) {
  const auto width = static_cast<float>(output.width);
  const auto height = static_cast<float>(output.height);
  for (size_t i = 0; i < clipped_.size(); ++i) {
    Box box = Mapped(clipped_[i], affine);
    box.x1 = std::clamp(box.x1, 0.0f, width);
    box.x2 = std::clamp(box.x2, 0.0f, width);
    box.y1 = std::clamp(box.y1, 0.0f, height);
    box.y2 = std::clamp(box.y2, 0.0f, height);
    clipped_[i] = box;
    unclipped_[i] = Mapped(unclipped_[i], affine);
  }
}

void MovingBoxes::Kept(double min_size, double min_visibility, std::vector<Box>* boxes,
                       std::vector<int>* indices) const {
  boxes->clear();
  indices->clear();
  for (size_t i = 0; i < clipped_.size(); ++i) {
    const Box& box = clipped_[i];
    if (box.width() < min_size || box.height() < min_size) {
      continue;
    }
    const double whole = Area(unclipped_[i]);
    if (min_visibility > 0 && (whole <= 0 || Area(box) < min_visibility * whole)) {
      continue;
    }
    boxes->push_back(box);
    indices->push_back(static_cast<int>(i));
  }
}

}  // namespace heterodl
