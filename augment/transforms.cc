#include "augment/transforms.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "augment/image_ops.h"
#include "opencv2/core.hpp"
#include "opencv2/imgproc.hpp"

namespace heterodl {

void ResizeTo(const cv::Mat& source, cv::Size size, cv::Mat& destination) {
  if (source.size() == size) {
    source.copyTo(destination);
    return;
  }
  // Bilinear interpolation reads 2x2 neighbours, so it is free of aliasing
  // only down to half size. Each dimension more than twice its target is
  // first halved with a 2:1 box filter, which antialiases like torchvision at
  // a fraction of the cost of area averaging at a fractional ratio (measured
  // ~0.9 ms against ~0.1 ms at 224 px). Bilinear resizing to exactly half
  // samples at 2x + 0.5, i.e. averages each pixel pair: the box filter, on
  // OpenCV's vectorized path (its INTER_AREA for a 2:1, 1:1 ratio is not).
  cv::Mat current = source;
  while (current.cols > 2 * size.width || current.rows > 2 * size.height) {
    const int fx = current.cols > 2 * size.width ? 2 : 1;
    const int fy = current.rows > 2 * size.height ? 2 : 1;
    const cv::Rect even(0, 0, current.cols - current.cols % fx, current.rows - current.rows % fy);
    cv::Mat halved;
    cv::resize(current(even), halved, {even.width / fx, even.height / fy}, 0, 0, cv::INTER_LINEAR);
    current = halved;
  }
  cv::resize(current, destination, size, 0, 0, cv::INTER_LINEAR);
}

cv::Size HalvedSize(cv::Size source, cv::Size target) {
  while (source.width > 2 * target.width || source.height > 2 * target.height) {
    if (source.width > 2 * target.width) {
      source.width /= 2;
    }
    if (source.height > 2 * target.height) {
      source.height /= 2;
    }
  }
  return source;
}

void ResizeMask(cv::Mat& mask, cv::Size size) {
  if (mask.size() == size) {
    return;
  }
  cv::Mat resized;
  cv::resize(mask, resized, size, 0, 0, cv::INTER_NEAREST);
  mask = resized;
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

double Area(cv::Size size) { return static_cast<double>(size.width) * size.height; }

// A size as specs write it: "224" when square, else "HxW".
std::string SizeSpec(cv::Size size) {
  return size.width == size.height ? absl::StrCat(size.width)
                                   : absl::StrCat(size.height, "x", size.width);
}

// An operation that moves pixels: it moves a mask and boxes with the image.
class GeometricTransform : public Transform {
 public:
  void Apply(cv::Mat& image, CounterRng& rng) const final { Move(image, nullptr, 0, rng); }
  void ApplyWithTargets(cv::Mat& image, cv::Mat* mask, int ignore_index, MovingBoxes* boxes,
                        CounterRng& rng) const final {
    const Affine moved =
        Move(image, mask != nullptr && !mask->empty() ? mask : nullptr, ignore_index, rng);
    if (boxes != nullptr) {
      boxes->Move(moved, image.size());
    }
  }

 protected:
  // Transforms `image`, and `*mask` the same way when not null; returns the
  // map of coordinates it applied (input pixels to output pixels).
  virtual Affine Move(cv::Mat& image, cv::Mat* mask, int ignore_index, CounterRng& rng) const = 0;
};

// The image (bilinear, antialiased) and its mask, if any (nearest), to
// `size`.
Affine ResizeBoth(cv::Mat& image, cv::Mat* mask, cv::Size size) {
  const Affine scaled = ScalingAffine(image.size(), size);
  cv::Mat resized;
  ResizeTo(image, size, resized);
  image = resized;
  if (mask != nullptr) {
    ResizeMask(*mask, size);
  }
  return scaled;
}

// `size` from the middle of `image`, zero-padding (or `fill`) first where
// it is smaller, as torchvision's CenterCrop; returns the shift of its
// coordinates.
Affine CenterCropTo(cv::Mat& image, cv::Size size, int fill) {
  int pad_left = 0;
  int pad_top = 0;
  if (image.cols < size.width || image.rows < size.height) {
    const int pad_x = std::max(0, size.width - image.cols);
    const int pad_y = std::max(0, size.height - image.rows);
    pad_left = pad_x / 2;
    pad_top = pad_y / 2;
    cv::Mat padded;
    cv::copyMakeBorder(image, padded, pad_top, pad_y - pad_top, pad_left, pad_x - pad_left,
                       cv::BORDER_CONSTANT, cv::Scalar::all(fill));
    image = padded;
  }
  // Round like torchvision, whose Python round() takes a half to the even
  // neighbour: top = round((H - size) / 2), so 12.5 is 12, 13.5 is 14.
  const int top = static_cast<int>(std::nearbyint((image.rows - size.height) / 2.0));
  const int left = static_cast<int>(std::nearbyint((image.cols - size.width) / 2.0));
  image = image(cv::Rect({left, top}, size)).clone();
  return TranslationAffine(pad_left - left, pad_top - top);
}

class RandomResizedCrop final : public GeometricTransform {
 public:
  RandomResizedCrop(cv::Size size, Range scale, Range ratio)
      : size_(size), scale_(scale), ratio_(ratio) {}

  Affine Move(cv::Mat& image, cv::Mat* mask, int, CounterRng& rng) const override {
    cv::Rect crop = PickCrop(image.cols, image.rows, rng);
    cv::Mat resized;
    ResizeTo(image(crop), size_, resized);
    image = resized;
    if (mask != nullptr) {
      cv::Mat region = (*mask)(crop);
      ResizeMask(region, size_);
      *mask = region.clone();
    }
    return RegionAffine({crop, size_});
  }

  std::optional<RegionRequest> PlanRegion(cv::Size image_size, CounterRng& rng) const override {
    return RegionRequest{PickCrop(image_size.width, image_size.height, rng), size_};
  }
  bool PlansRegions() const override { return true; }

  void ApplyToRegion(const cv::Mat& region, const RegionRequest& request,
                     cv::Mat& result) const override {
    ResizeTo(region, request.output, result);
  }

  cv::Size FixedOutputSize() const override { return size_; }
  cv::Size OutputSize(cv::Size) const override { return size_; }
  // At most the whole image read (scale up to 1), then the output written.
  double Cost(cv::Size input) const override { return Area(input) + Area(size_); }

  std::string Spec() const override {
    return absl::StrFormat("random_resized_crop(%s,scale=%g:%g,ratio=%g:%g)", SizeSpec(size_),
                           scale_.low, scale_.high, ratio_.low, ratio_.high);
  }

 private:
  cv::Rect PickCrop(int width, int height, CounterRng& rng) const {
    return RandomResizedCropRect(width, height, scale_, ratio_, rng);
  }

  cv::Size size_;
  Range scale_;
  Range ratio_;
};

// torchvision: the shorter side becomes `size`, the longer one scales along
// (truncated).
cv::Size ShorterSideTo(cv::Size image, int size) {
  const bool wide = image.width >= image.height;
  const double scale = static_cast<double>(size) / (wide ? image.height : image.width);
  return wide ? cv::Size(std::max(1, static_cast<int>(image.width * scale)), size)
              : cv::Size(size, std::max(1, static_cast<int>(image.height * scale)));
}

// resize(size): the shorter side to `size`; resize(HxW): exactly that.
class Resize final : public GeometricTransform {
 public:
  explicit Resize(int size) : size_(size), exact_(0, 0) {}
  explicit Resize(cv::Size exact) : size_(0), exact_(exact) {}

  Affine Move(cv::Mat& image, cv::Mat* mask, int, CounterRng&) const override {
    const cv::Size target = Target(image.size());
    return ResizeBoth(image, mask, target);
  }

  std::optional<RegionRequest> PlanRegion(cv::Size image_size, CounterRng&) const override {
    return RegionRequest{cv::Rect({0, 0}, image_size), Target(image_size)};
  }
  bool PlansRegions() const override { return true; }

  void ApplyToRegion(const cv::Mat& region, const RegionRequest& request,
                     cv::Mat& result) const override {
    ResizeTo(region, request.output, result);
  }

  cv::Size OutputSize(cv::Size input) const override { return Target(input); }
  double Cost(cv::Size input) const override { return Area(input) + Area(Target(input)); }

  cv::Size FixedOutputSize() const override { return exact_; }

  std::string Spec() const override {
    return size_ > 0 ? absl::StrFormat("resize(%d)", size_)
                     : absl::StrFormat("resize(%s)", SizeSpec(exact_));
  }

 private:
  cv::Size Target(cv::Size image) const { return size_ > 0 ? ShorterSideTo(image, size_) : exact_; }

  int size_;
  cv::Size exact_;
};

class CenterCrop final : public GeometricTransform {
 public:
  explicit CenterCrop(cv::Size size) : size_(size) {}

  Affine Move(cv::Mat& image, cv::Mat* mask, int ignore_index, CounterRng&) const override {
    if (mask != nullptr) {
      CenterCropTo(*mask, size_, ignore_index);
    }
    return CenterCropTo(image, size_, 0);
  }

  cv::Size FixedOutputSize() const override { return size_; }
  cv::Size OutputSize(cv::Size) const override { return size_; }
  // Padding (a smaller image) and the copy of the crop.
  double Cost(cv::Size) const override { return 2 * Area(size_); }

  std::string Spec() const override { return absl::StrFormat("center_crop(%s)", SizeSpec(size_)); }

 private:
  cv::Size size_;
};

// torchvision.transforms.v2.RandomCrop(size, padding, pad_if_needed, fill):
// `padding` on every border first; then, with pad_if_needed, a side shorter
// than the crop is padded by the difference on both ends; then a crop at a
// uniform offset.
class RandomCrop final : public GeometricTransform {
 public:
  RandomCrop(cv::Size size, int padding, bool pad_if_needed, int fill)
      : size_(size), padding_(padding), pad_if_needed_(pad_if_needed), fill_(fill) {}

  Affine Move(cv::Mat& image, cv::Mat* mask, int ignore_index, CounterRng& rng) const override {
    int pad_x = padding_;
    int pad_y = padding_;
    if (pad_if_needed_) {
      pad_x += std::max(0, size_.width - (image.cols + 2 * padding_));
      pad_y += std::max(0, size_.height - (image.rows + 2 * padding_));
    }
    const auto pad = [&](cv::Mat& pixels, int fill) {
      if (pad_x > 0 || pad_y > 0) {
        cv::Mat padded;
        cv::copyMakeBorder(pixels, padded, pad_y, pad_y, pad_x, pad_x, cv::BORDER_CONSTANT,
                           cv::Scalar::all(fill));
        pixels = padded;
      }
    };
    pad(image, fill_);
    if (mask != nullptr) {
      pad(*mask, ignore_index);
    }
    const Affine padded = TranslationAffine(pad_x, pad_y);
    if (image.cols < size_.width || image.rows < size_.height) {
      // Smaller than the crop without pad_if_needed (torchvision raises):
      // centred, zero-padded, as center_crop does.
      if (mask != nullptr) {
        CenterCropTo(*mask, size_, ignore_index);
      }
      return ThenAffine(padded, CenterCropTo(image, size_, 0));
    }
    // As torchvision draws them: the top, then the left.
    const int top = static_cast<int>(rng.Below(image.rows - size_.height + 1));
    const int left = static_cast<int>(rng.Below(image.cols - size_.width + 1));
    image = image(cv::Rect({left, top}, size_)).clone();
    if (mask != nullptr) {
      *mask = (*mask)(cv::Rect({left, top}, size_)).clone();
    }
    return TranslationAffine(pad_x - left, pad_y - top);
  }

  cv::Size FixedOutputSize() const override { return size_; }
  cv::Size OutputSize(cv::Size) const override { return size_; }
  double Cost(cv::Size input) const override { return Area(input) + 2 * Area(size_); }

  std::string Spec() const override {
    return absl::StrFormat("random_crop(%s,padding=%d,pad_if_needed=%d,fill=%d)", SizeSpec(size_),
                           padding_, pad_if_needed_ ? 1 : 0, fill_);
  }

 private:
  cv::Size size_;
  int padding_;
  bool pad_if_needed_;
  int fill_;
};

// torchvision.transforms.v2.RandomResize(min_size, max_size): the shorter
// side to an integer drawn uniformly from [min_size, max_size).
class RandomResize final : public GeometricTransform {
 public:
  RandomResize(int min_size, int max_size) : min_size_(min_size), max_size_(max_size) {}

  Affine Move(cv::Mat& image, cv::Mat* mask, int, CounterRng& rng) const override {
    const int size = min_size_ + static_cast<int>(rng.Below(max_size_ - min_size_));
    const cv::Size target = ShorterSideTo(image.size(), size);
    return ResizeBoth(image, mask, target);
  }

  // The largest it can make.
  cv::Size OutputSize(cv::Size input) const override { return ShorterSideTo(input, max_size_ - 1); }
  double Cost(cv::Size input) const override { return Area(input) + Area(OutputSize(input)); }

  std::string Spec() const override {
    return absl::StrFormat("random_resize(%d,%d)", min_size_, max_size_);
  }

 private:
  int min_size_;
  int max_size_;
};

// torchvision.transforms.v2.ScaleJitter: the image scaled to fit
// target_size, times a factor drawn uniformly from `scale`, both sides
// truncated. target_size is written HxW here; torchvision's tuple is
// (width, height) (its r = min(target[0] / width, target[1] / height)).
class ScaleJitter final : public GeometricTransform {
 public:
  ScaleJitter(cv::Size target, Range scale) : target_(target), scale_(scale) {}

  Affine Move(cv::Mat& image, cv::Mat* mask, int, CounterRng& rng) const override {
    const double scale = rng.Uniform(scale_.low, scale_.high);
    const cv::Size target = Scaled(image.size(), scale);
    return ResizeBoth(image, mask, target);
  }

  cv::Size OutputSize(cv::Size input) const override { return Scaled(input, scale_.high); }
  double Cost(cv::Size input) const override { return Area(input) + Area(OutputSize(input)); }

  std::string Spec() const override {
    return absl::StrFormat("scale_jitter(%s,scale_range=%g:%g)", SizeSpec(target_), scale_.low,
                           scale_.high);
  }

 private:
  cv::Size Scaled(cv::Size image, double scale) const {
    const double r = std::min(static_cast<double>(target_.width) / image.width,
                              static_cast<double>(target_.height) / image.height) *
                     scale;
    return {std::max(1, static_cast<int>(image.width * r)),
            std::max(1, static_cast<int>(image.height * r))};
  }

  cv::Size target_;
  Range scale_;
};

class HorizontalFlip final : public GeometricTransform {
 public:
  explicit HorizontalFlip(double probability) : probability_(probability) {}

  Affine Move(cv::Mat& image, cv::Mat* mask, int, CounterRng& rng) const override {
    // Always draw, so later operations see the same numbers whatever p is.
    if (rng.NextDouble() >= probability_) {
      return IdentityAffine();
    }
    cv::flip(image, image, 1);
    if (mask != nullptr) {
      cv::flip(*mask, *mask, 1);
    }
    return {-1, 0, static_cast<double>(image.cols), 0, 1, 0};
  }

  double Cost(cv::Size input) const override { return Area(input); }

  std::string Spec() const override { return absl::StrFormat("hflip(%g)", probability_); }

 private:
  double probability_;
};

// Luma as torchvision computes it for grayscale conversion (ITU-R 601-2).
cv::Mat Luma(const cv::Mat& rgb) {
  cv::Mat gray;
  cv::cvtColor(rgb, gray, cv::COLOR_RGB2GRAY);
  return gray;
}

// RandomApply's draw: whether an operation of probability `probability`
// runs. Nothing is drawn at 1, so specs without a p draw what they always
// did.
bool Applies(double probability, CounterRng& rng) {
  return probability >= 1 || rng.NextDouble() < probability;
}

// ",p=0.8" when an operation is applied only sometimes.
std::string ProbabilitySpec(double probability) {
  return probability < 1 ? absl::StrFormat(",p=%g", probability) : std::string();
}

class ColorJitter final : public Transform {
 public:
  ColorJitter(double brightness, double contrast, double saturation, double hue, double probability)
      : brightness_(brightness),
        contrast_(contrast),
        saturation_(saturation),
        hue_(hue),
        probability_(probability) {}

  void Apply(cv::Mat& image, CounterRng& rng) const override {
    if (!Applies(probability_, rng)) {
      return;
    }
    // Draw everything first, in a fixed order, as torchvision's get_params:
    // the order of the four adjustments, then each factor.
    int order[4] = {0, 1, 2, 3};
    for (int i = 3; i > 0; --i) {
      std::swap(order[i], order[rng.Below(i + 1)]);
    }
    const double brightness = rng.Uniform(std::max(0.0, 1 - brightness_), 1 + brightness_);
    const double contrast = rng.Uniform(std::max(0.0, 1 - contrast_), 1 + contrast_);
    const double saturation = rng.Uniform(std::max(0.0, 1 - saturation_), 1 + saturation_);
    const double hue = rng.Uniform(-hue_, hue_);
    for (int step : order) {
      if (step == 0 && brightness_ > 0) {
        image.convertTo(image, -1, brightness, 0);
      } else if (step == 1 && contrast_ > 0) {
        // Blend with the mean luma of the whole image.
        const double mean = cv::mean(Luma(image))[0];
        image.convertTo(image, -1, contrast, (1 - contrast) * mean);
      } else if (step == 2 && saturation_ > 0) {
        // Each pixel blended with its luma: one 3x3 colour transform, one
        // pass (a gray image and a blend took three).
        const auto blend = static_cast<float>(saturation);
        cv::Matx33f transform;
        for (int row = 0; row < 3; ++row) {
          for (int column = 0; column < 3; ++column) {
            transform(row, column) =
                (1 - blend) * kLumaWeights[column] + (row == column ? blend : 0.0f);
          }
        }
        cv::transform(image, image, transform);
      } else if (step == 3 && hue_ > 0) {
        AdjustHueImage(image, hue);
      }
    }
  }

  // Brightness one pass, contrast two (luma, blend), saturation one of
  // three passes' arithmetic, hue one of about four's.
  double Cost(cv::Size input) const override {
    const double passes = (brightness_ > 0 ? 1 : 0) + (contrast_ > 0 ? 2 : 0) +
                          (saturation_ > 0 ? 3 : 0) + (hue_ > 0 ? 4 : 0);
    return passes * Area(input);
  }

  std::string Spec() const override {
    return absl::StrFormat("color_jitter(%g,%g,%g,%g%s)", brightness_, contrast_, saturation_, hue_,
                           ProbabilitySpec(probability_));
  }

 private:
  double brightness_, contrast_, saturation_, hue_;
  double probability_;
};

class RandomGrayscale final : public Transform {
 public:
  explicit RandomGrayscale(double probability) : probability_(probability) {}

  void Apply(cv::Mat& image, CounterRng& rng) const override {
    if (rng.NextDouble() < probability_) {
      cv::cvtColor(Luma(image), image, cv::COLOR_GRAY2RGB);
    }
  }

  double Cost(cv::Size input) const override { return 2 * Area(input); }

  std::string Spec() const override { return absl::StrFormat("grayscale(%g)", probability_); }

 private:
  double probability_;
};

class GaussianBlur final : public Transform {
 public:
  GaussianBlur(int kernel_size, Range sigma, double probability)
      : kernel_size_(kernel_size), sigma_(sigma), probability_(probability) {}

  void Apply(cv::Mat& image, CounterRng& rng) const override {
    if (!Applies(probability_, rng)) {
      return;
    }
    const double sigma = rng.Uniform(sigma_.low, sigma_.high);
    // Taps beyond 4 sigma weigh less than 3e-4 of the centre's and together
    // under 1e-4: on 8-bit pixels they change nothing torchvision's kernel
    // of kernel_size would not round away, and skipping them makes DINO's
    // blur (23 taps at sigma 0.1 to 2) about twice as fast.
    const int radius = std::min(kernel_size_ / 2, static_cast<int>(std::ceil(4 * sigma)));
    const cv::Mat kernel = CentralTaps(sigma, radius);
    // A float kernel: OpenCV's fixed-point GaussianBlur is bit-exact across
    // platforms but up to 2.4x slower on DINO's 96 px views.
    cv::sepFilter2D(image, image, -1, kernel, kernel, {-1, -1}, 0, cv::BORDER_REFLECT_101);
  }

  // Separable: a row pass and a column pass, each reading kernel_size
  // pixels per pixel, whatever sigma is.
  double Cost(cv::Size input) const override { return 2.0 * kernel_size_ * Area(input); }

  std::string Spec() const override {
    return absl::StrFormat("gaussian_blur(%d,sigma=%g:%g%s)", kernel_size_, sigma_.low, sigma_.high,
                           ProbabilitySpec(probability_));
  }

 private:
  // torchvision's _get_gaussian_kernel1d(kernel_size, sigma) in float32:
  // the whole kernel normalized, then its 2 x radius + 1 central taps.
  cv::Mat CentralTaps(double sigma, int radius) const {
    const int half = kernel_size_ / 2;
    std::vector<float> taps(kernel_size_);
    float sum = 0;
    for (int i = 0; i < kernel_size_; ++i) {
      const float x = static_cast<float>(i - half) / static_cast<float>(sigma);
      taps[i] = std::exp(-0.5f * x * x);
      sum += taps[i];
    }
    cv::Mat kernel(2 * radius + 1, 1, CV_32F);
    for (int i = -radius; i <= radius; ++i) {
      kernel.at<float>(i + radius) = taps[half + i] / sum;
    }
    return kernel;
  }

  int kernel_size_;
  Range sigma_;
  double probability_;
};

class RandomRotation final : public GeometricTransform {
 public:
  explicit RandomRotation(Range degrees) : degrees_(degrees) {}

  Affine Move(cv::Mat& image, cv::Mat* mask, int ignore_index, CounterRng& rng) const override {
    const double angle = rng.Uniform(degrees_.low, degrees_.high);
    if (angle == 0) {
      return IdentityAffine();
    }
    // About the middle of the centre pixels, in pixel indices; the same
    // rotation about (width / 2, height / 2) in the continuous coordinates
    // of boxes (a pixel's centre is its index + 0.5).
    const cv::Point2f center(image.cols * 0.5f - 0.5f, image.rows * 0.5f - 0.5f);
    const cv::Mat rotation = cv::getRotationMatrix2D(center, angle, 1.0);
    const Affine for_boxes =
        cv::getRotationMatrix2D(cv::Point2f(image.cols * 0.5f, image.rows * 0.5f), angle, 1.0);
    const auto rotate = [&](cv::Mat& pixels, int fill) {
      cv::Mat rotated;
      cv::warpAffine(pixels, rotated, rotation, pixels.size(), cv::INTER_NEAREST,
                     cv::BORDER_CONSTANT, cv::Scalar::all(fill));
      pixels = rotated;
    };
    rotate(image, 0);
    if (mask != nullptr) {
      rotate(*mask, ignore_index);
    }
    return for_boxes;
  }

  double Cost(cv::Size input) const override { return 2 * Area(input); }

  std::string Spec() const override {
    return absl::StrFormat("rotation(%g:%g)", degrees_.low, degrees_.high);
  }

 private:
  Range degrees_;
};

class RandomAffine final : public GeometricTransform {
 public:
  RandomAffine(const AffineRanges& ranges, int fill) : ranges_(ranges), fill_(fill) {}

  Affine Move(cv::Mat& image, cv::Mat* mask, int ignore_index, CounterRng& rng) const override {
    // As RandomAffine.make_params draws them.
    AffineParameters parameters;
    parameters.angle = rng.Uniform(ranges_.degrees.low, ranges_.degrees.high);
    if (ranges_.translate_x > 0 || ranges_.translate_y > 0) {
      const double max_dx = ranges_.translate_x * image.cols;
      const double max_dy = ranges_.translate_y * image.rows;
      parameters.translate_x = std::nearbyint(rng.Uniform(-max_dx, max_dx));
      parameters.translate_y = std::nearbyint(rng.Uniform(-max_dy, max_dy));
    }
    if (ranges_.scale) {
      parameters.scale = rng.Uniform(ranges_.scale->low, ranges_.scale->high);
    }
    if (ranges_.shear) {
      parameters.shear_x = rng.Uniform(ranges_.shear->low, ranges_.shear->high);
    }
    return AffineImage(image, parameters, fill_, mask, ignore_index);
  }

  // The grid (two floats a pixel) and the nearest-neighbour gather.
  double Cost(cv::Size input) const override { return 4 * Area(input); }

  std::string Spec() const override {
    std::string spec =
        absl::StrFormat("affine(degrees=%g:%g", ranges_.degrees.low, ranges_.degrees.high);
    if (ranges_.translate_x > 0 || ranges_.translate_y > 0) {
      absl::StrAppendFormat(&spec, ",translate=%g:%g", ranges_.translate_x, ranges_.translate_y);
    }
    if (ranges_.scale) {
      absl::StrAppendFormat(&spec, ",scale=%g:%g", ranges_.scale->low, ranges_.scale->high);
    }
    if (ranges_.shear) {
      absl::StrAppendFormat(&spec, ",shear=%g:%g", ranges_.shear->low, ranges_.shear->high);
    }
    absl::StrAppendFormat(&spec, ",fill=%d)", fill_);
    return spec;
  }

 private:
  AffineRanges ranges_;
  int fill_;
};

}  // namespace

Affine RegionAffine(const RegionRequest& request) {
  return ThenAffine(TranslationAffine(-request.region.x, -request.region.y),
                    ScalingAffine(request.region.size(), request.output));
}

std::unique_ptr<Transform> MakeColorJitter(double brightness, double contrast, double saturation,
                                           double hue, double probability) {
  return std::make_unique<ColorJitter>(brightness, contrast, saturation, hue, probability);
}
std::unique_ptr<Transform> MakeRandomGrayscale(double probability) {
  return std::make_unique<RandomGrayscale>(probability);
}
std::unique_ptr<Transform> MakeGaussianBlur(int kernel_size, Range sigma, double probability) {
  return std::make_unique<GaussianBlur>(kernel_size, sigma, probability);
}
std::unique_ptr<Transform> MakeRandomAffine(const AffineRanges& ranges, int fill) {
  return std::make_unique<RandomAffine>(ranges, fill);
}
std::unique_ptr<Transform> MakeRandomRotation(Range degrees) {
  return std::make_unique<RandomRotation>(degrees);
}

std::unique_ptr<Transform> MakeRandomResizedCrop(cv::Size size, Range scale, Range ratio) {
  return std::make_unique<RandomResizedCrop>(size, scale, ratio);
}
std::unique_ptr<Transform> MakeResize(int size) { return std::make_unique<Resize>(size); }
std::unique_ptr<Transform> MakeResizeTo(cv::Size size) { return std::make_unique<Resize>(size); }
std::unique_ptr<Transform> MakeCenterCrop(cv::Size size) {
  return std::make_unique<CenterCrop>(size);
}
std::unique_ptr<Transform> MakeRandomCrop(cv::Size size, int padding, bool pad_if_needed,
                                          int fill) {
  return std::make_unique<RandomCrop>(size, padding, pad_if_needed, fill);
}
std::unique_ptr<Transform> MakeRandomResize(int min_size, int max_size) {
  return std::make_unique<RandomResize>(min_size, max_size);
}
std::unique_ptr<Transform> MakeScaleJitter(cv::Size target, Range scale) {
  return std::make_unique<ScaleJitter>(target, scale);
}
std::unique_ptr<Transform> MakeHorizontalFlip(double probability) {
  return std::make_unique<HorizontalFlip>(probability);
}

}  // namespace heterodl
