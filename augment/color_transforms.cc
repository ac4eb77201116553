// The photometric operations of the self-supervised and DeiT recipes, and
// random erasing (declared in transforms.h).
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "augment/image_ops.h"
#include "augment/transforms.h"
#include "opencv2/core.hpp"

namespace heterodl {
namespace {

double Area(cv::Size size) { return static_cast<double>(size.width) * size.height; }

// One of torchvision.transforms.v2's Random* photometric classes: with
// probability p (drawn first, always), `operation` on the whole image.
class RandomPhotometric final : public Transform {
 public:
  RandomPhotometric(double probability, std::function<void(cv::Mat&)> operation, double passes,
                    std::string spec)
      : probability_(probability),
        operation_(std::move(operation)),
        passes_(passes),
        spec_(std::move(spec)) {}

  void Apply(cv::Mat& image, CounterRng& rng) const override {
    if (rng.NextDouble() < probability_) {
      operation_(image);
    }
  }

  double Cost(cv::Size input) const override { return passes_ * Area(input); }
  std::string Spec() const override { return spec_; }

 private:
  double probability_;
  std::function<void(cv::Mat&)> operation_;
  // Passes over the pixels, for Cost().
  double passes_;
  std::string spec_;
};

class RandomErasing final : public Transform {
 public:
  RandomErasing(double probability, Range scale, Range ratio, int value, bool random_value)
      : probability_(probability),
        scale_(scale),
        ratio_(ratio),
        value_(value),
        random_value_(random_value) {}

  void Apply(cv::Mat& image, CounterRng& rng) const override {
    if (rng.NextDouble() >= probability_) {
      return;
    }
    // RandomErasing.make_params: ten tries at a rectangle strictly smaller
    // than the image, rounded as Python rounds (half to even).
    const double area = Area(image.size());
    const double log_low = std::log(ratio_.low);
    const double log_high = std::log(ratio_.high);
    for (int attempt = 0; attempt < 10; ++attempt) {
      const double erase_area = area * rng.Uniform(scale_.low, scale_.high);
      const double aspect = std::exp(rng.Uniform(log_low, log_high));
      const int h = static_cast<int>(std::nearbyint(std::sqrt(erase_area * aspect)));
      const int w = static_cast<int>(std::nearbyint(std::sqrt(erase_area / aspect)));
      if (!(h < image.rows && w < image.cols)) {
        continue;
      }
      const int top = static_cast<int>(rng.Below(image.rows - h + 1));
      const int left = static_cast<int>(rng.Below(image.cols - w + 1));
      cv::Mat region = image(cv::Rect(left, top, w, h));
      if (!random_value_) {
        region.setTo(cv::Scalar::all(value_));
        return;
      }
      for (int y = 0; y < h; ++y) {
        uint8_t* pixel = region.ptr<uint8_t>(y);
        for (int x = 0; x < w * 3; x += 4) {
          const uint32_t bits = rng.NextU32();
          for (int k = 0; k < 4 && x + k < w * 3; ++k) {
            pixel[x + k] = static_cast<uint8_t>(bits >> (8 * k));
          }
        }
      }
      return;
    }
  }

  // At most a third of the image written by default; all of it at worst.
  double Cost(cv::Size input) const override { return Area(input); }

  std::string Spec() const override {
    return absl::StrFormat("random_erasing(p=%g,scale=%g:%g,ratio=%g:%g,value=%s)", probability_,
                           scale_.low, scale_.high, ratio_.low, ratio_.high,
                           random_value_ ? std::string("random") : absl::StrCat(value_));
  }

 private:
  double probability_;
  Range scale_;
  Range ratio_;
  int value_;
  bool random_value_;
};

}  // namespace

std::unique_ptr<Transform> MakeRandomSolarize(double threshold, double probability) {
  return std::make_unique<RandomPhotometric>(
      probability, [threshold](cv::Mat& image) { SolarizeImage(image, threshold); }, 1,
      absl::StrFormat("solarize(%g,p=%g)", threshold, probability));
}

std::unique_ptr<Transform> MakeRandomPosterize(int bits, double probability) {
  return std::make_unique<RandomPhotometric>(
      probability, [bits](cv::Mat& image) { PosterizeImage(image, bits); }, 1,
      absl::StrFormat("posterize(%d,p=%g)", bits, probability));
}

std::unique_ptr<Transform> MakeRandomEqualize(double probability) {
  return std::make_unique<RandomPhotometric>(probability, &EqualizeImage, 2,
                                             absl::StrFormat("equalize(p=%g)", probability));
}

std::unique_ptr<Transform> MakeRandomAutocontrast(double probability) {
  return std::make_unique<RandomPhotometric>(probability, &AutocontrastImage, 3,
                                             absl::StrFormat("autocontrast(p=%g)", probability));
}

std::unique_ptr<Transform> MakeRandomAdjustSharpness(double sharpness_factor, double probability) {
  return std::make_unique<RandomPhotometric>(
      probability,
      [sharpness_factor](cv::Mat& image) { AdjustSharpnessImage(image, sharpness_factor); }, 11,
      absl::StrFormat("adjust_sharpness(%g,p=%g)", sharpness_factor, probability));
}

std::unique_ptr<Transform> MakeRandomErasing(double probability, Range scale, Range ratio,
                                             int value, bool random_value) {
  return std::make_unique<RandomErasing>(probability, scale, ratio, value, random_value);
}

}  // namespace heterodl
