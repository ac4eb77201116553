#include "augment/transforms.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "opencv2/core.hpp"
#include "opencv2/imgproc.hpp"

namespace heterodl {

void ResizeTo(const cv::Mat& source, cv::Size size, cv::Mat& destination) {
  if (source.size() == size) {
    source.copyTo(destination);
    return;
  }
  // Bilinear interpolation reads 2x2 neighbours, so it only stays free of
  // aliasing down to half size; below that, area averaging (slower) acts as
  // the antialiasing filter torchvision applies.
  const bool below_half = size.width * 2 < source.cols || size.height * 2 < source.rows;
  cv::resize(source, destination, size, 0, 0, below_half ? cv::INTER_AREA : cv::INTER_LINEAR);
}

cv::Rect RandomResizedCropRect(int width, int height, Range scale, Range ratio, CounterRng& rng) {
  const double area = static_cast<double>(width) * height;
  const double log_low = std::log(ratio.low);
  const double log_high = std::log(ratio.high);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.Uniform(scale.low, scale.high);
    const double aspect = std::exp(rng.Uniform(log_low, log_high));
    const int w = static_cast<int>(std::lround(std::sqrt(target_area * aspect)));
    const int h = static_cast<int>(std::lround(std::sqrt(target_area / aspect)));
    if (w > 0 && h > 0 && w <= width && h <= height) {
      const int top = static_cast<int>(rng.Below(height - h + 1));
      const int left = static_cast<int>(rng.Below(width - w + 1));
      return {left, top, w, h};
    }
  }
  const double input_ratio = static_cast<double>(width) / height;
  int w = width;
  int h = height;
  if (input_ratio < ratio.low) {
    h = static_cast<int>(std::lround(w / ratio.low));
  } else if (input_ratio > ratio.high) {
    w = static_cast<int>(std::lround(h * ratio.high));
  }
  w = std::clamp(w, 1, width);
  h = std::clamp(h, 1, height);
  return {(width - w) / 2, (height - h) / 2, w, h};
}

namespace {

class RandomResizedCrop final : public Transform {
 public:
  RandomResizedCrop(int size, Range scale, Range ratio)
      : size_(size), scale_(scale), ratio_(ratio) {}

  void Apply(cv::Mat& image, CounterRng& rng) const override {
    cv::Rect crop = PickCrop(image.cols, image.rows, rng);
    cv::Mat resized;
    ResizeTo(image(crop), {size_, size_}, resized);
    image = resized;
  }

  std::optional<RegionRequest> PlanRegion(cv::Size image_size, CounterRng& rng) const override {
    return RegionRequest{PickCrop(image_size.width, image_size.height, rng), {size_, size_}};
  }

  void ApplyToRegion(cv::Mat& region, const RegionRequest& request) const override {
    cv::Mat resized;
    ResizeTo(region, request.output, resized);
    region = resized;
  }

  cv::Size FixedOutputSize() const override { return {size_, size_}; }

  std::string Spec() const override {
    return absl::StrFormat("random_resized_crop(%d,scale=%g:%g,ratio=%g:%g)", size_, scale_.low,
                           scale_.high, ratio_.low, ratio_.high);
  }

 private:
  cv::Rect PickCrop(int width, int height, CounterRng& rng) const {
    return RandomResizedCropRect(width, height, scale_, ratio_, rng);
  }

  int size_;
  Range scale_;
  Range ratio_;
};

class Resize final : public Transform {
 public:
  explicit Resize(int size) : size_(size) {}

  void Apply(cv::Mat& image, CounterRng&) const override {
    cv::Mat resized;
    ResizeTo(image, Target(image.size()), resized);
    image = resized;
  }

  std::optional<RegionRequest> PlanRegion(cv::Size image_size, CounterRng&) const override {
    return RegionRequest{cv::Rect({0, 0}, image_size), Target(image_size)};
  }

  void ApplyToRegion(cv::Mat& region, const RegionRequest& request) const override {
    cv::Mat resized;
    ResizeTo(region, request.output, resized);
    region = resized;
  }

  std::string Spec() const override { return absl::StrFormat("resize(%d)", size_); }

 private:
  // torchvision: the shorter side becomes `size_`, the longer one scales
  // along (truncated).
  cv::Size Target(cv::Size image) const {
    const bool wide = image.width >= image.height;
    const double scale = static_cast<double>(size_) / (wide ? image.height : image.width);
    return wide ? cv::Size(std::max(1, static_cast<int>(image.width * scale)), size_)
                : cv::Size(size_, std::max(1, static_cast<int>(image.height * scale)));
  }

  int size_;
};

class CenterCrop final : public Transform {
 public:
  explicit CenterCrop(int size) : size_(size) {}

  void Apply(cv::Mat& image, CounterRng&) const override {
    // torchvision pads a smaller image with zeros before cropping.
    if (image.cols < size_ || image.rows < size_) {
      const int pad_x = std::max(0, size_ - image.cols);
      const int pad_y = std::max(0, size_ - image.rows);
      cv::Mat padded;
      cv::copyMakeBorder(image, padded, pad_y / 2, pad_y - pad_y / 2, pad_x / 2, pad_x - pad_x / 2,
                         cv::BORDER_CONSTANT, cv::Scalar::all(0));
      image = padded;
    }
    // Round like torchvision: top = round((H - size) / 2).
    const int top = static_cast<int>(std::lround((image.rows - size_) / 2.0));
    const int left = static_cast<int>(std::lround((image.cols - size_) / 2.0));
    image = image(cv::Rect(left, top, size_, size_)).clone();
  }

  cv::Size FixedOutputSize() const override { return {size_, size_}; }

  std::string Spec() const override { return absl::StrFormat("center_crop(%d)", size_); }

 private:
  int size_;
};

class HorizontalFlip final : public Transform {
 public:
  explicit HorizontalFlip(double probability) : probability_(probability) {}

  void Apply(cv::Mat& image, CounterRng& rng) const override {
    // Always draw, so later operations see the same numbers whatever p is.
    if (rng.NextDouble() < probability_) cv::flip(image, image, 1);
  }

  std::string Spec() const override { return absl::StrFormat("hflip(%g)", probability_); }

 private:
  double probability_;
};

}  // namespace

std::unique_ptr<Transform> MakeRandomResizedCrop(int size, Range scale, Range ratio) {
  return std::make_unique<RandomResizedCrop>(size, scale, ratio);
}
std::unique_ptr<Transform> MakeResize(int size) { return std::make_unique<Resize>(size); }
std::unique_ptr<Transform> MakeCenterCrop(int size) { return std::make_unique<CenterCrop>(size); }
std::unique_ptr<Transform> MakeHorizontalFlip(double probability) {
  return std::make_unique<HorizontalFlip>(probability);
}

}  // namespace heterodl
