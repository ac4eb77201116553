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
  const bool shrinking = size.width < source.cols && size.height < source.rows;
  cv::resize(source, destination, size, 0, 0, shrinking ? cv::INTER_AREA : cv::INTER_LINEAR);
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

  cv::Size FixedOutputSize() const override { return {size_, size_}; }

  std::string Spec() const override {
    return absl::StrFormat("random_resized_crop(%d,scale=%g:%g,ratio=%g:%g)", size_, scale_.low,
                           scale_.high, ratio_.low, ratio_.high);
  }

 private:
  // torchvision's RandomResizedCrop.get_params: ten tries at a random area
  // and log-uniform aspect ratio, then a centred crop clamped to `ratio`.
  cv::Rect PickCrop(int width, int height, CounterRng& rng) const {
    const double area = static_cast<double>(width) * height;
    const double log_low = std::log(ratio_.low);
    const double log_high = std::log(ratio_.high);
    for (int attempt = 0; attempt < 10; ++attempt) {
      const double target_area = area * rng.Uniform(scale_.low, scale_.high);
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
    if (input_ratio < ratio_.low) {
      h = static_cast<int>(std::lround(w / ratio_.low));
    } else if (input_ratio > ratio_.high) {
      w = static_cast<int>(std::lround(h * ratio_.high));
    }
    w = std::clamp(w, 1, width);
    h = std::clamp(h, 1, height);
    return {(width - w) / 2, (height - h) / 2, w, h};
  }

  int size_;
  Range scale_;
  Range ratio_;
};

class Resize final : public Transform {
 public:
  explicit Resize(int size) : size_(size) {}

  void Apply(cv::Mat& image, CounterRng&) const override {
    const bool wide = image.cols >= image.rows;
    const double scale = static_cast<double>(size_) / (wide ? image.rows : image.cols);
    cv::Size target = wide ? cv::Size(std::max(1, static_cast<int>(image.cols * scale)), size_)
                           : cv::Size(size_, std::max(1, static_cast<int>(image.rows * scale)));
    cv::Mat resized;
    ResizeTo(image, target, resized);
    image = resized;
  }

  std::string Spec() const override { return absl::StrFormat("resize(%d)", size_); }

 private:
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
