// RandAugment and TrivialAugmentWide (declared in transforms.h): torchvision
// v2's operation lists, magnitude bins and order of draws, on heterodl's
// counter RNG. Geometric operations also move a segmentation mask and boxes,
// which torchvision's policies refuse.
#include <cmath>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "augment/image_ops.h"
#include "augment/transforms.h"
#include "opencv2/core.hpp"

namespace heterodl {
namespace {

// The operations, in the order of torchvision's _AUGMENTATION_SPACE (the
// index a policy draws picks from this list).
enum class PolicyOperation {
  kIdentity,
  kShearX,
  kShearY,
  kTranslateX,
  kTranslateY,
  kRotate,
  kBrightness,
  kColor,
  kContrast,
  kSharpness,
  kPosterize,
  kSolarize,
  kAutoContrast,
  kEqualize,
};
constexpr int kPolicyOperations = 14;

// Where the two policies' magnitude bins differ: the top of each linear
// range (a translation's as a fraction of the side, or in pixels), and the
// divisor of posterize's bins.
struct MagnitudeSpace {
  float shear;
  // RandAugment: 150/331 of the side; TrivialAugmentWide: 32 pixels.
  bool translate_by_side;
  float translate;
  float rotate;
  float enhance;
  float posterize_divisor;
};
constexpr MagnitudeSpace kRandAugmentSpace = {0.3f, true, 150.0f / 331.0f, 30.0f, 0.9f, 4.0f};
constexpr MagnitudeSpace kTrivialAugmentWideSpace = {0.99f, false, 32.0f, 135.0f, 0.99f, 6.0f};

// Whether an operation has magnitudes, and whether they take a random sign.
bool HasMagnitude(PolicyOperation operation) {
  return operation != PolicyOperation::kIdentity && operation != PolicyOperation::kAutoContrast &&
         operation != PolicyOperation::kEqualize;
}
bool Signed(PolicyOperation operation) {
  return HasMagnitude(operation) && operation != PolicyOperation::kPosterize &&
         operation != PolicyOperation::kSolarize;
}

// magnitudes_fn(num_bins, height, width)[bin], as float32 computes it.
float Magnitude(const MagnitudeSpace& space, PolicyOperation operation, int bins, int bin,
                cv::Size image) {
  switch (operation) {
    case PolicyOperation::kShearX:
    case PolicyOperation::kShearY:
      return LinspaceAt(0, space.shear, bins, bin);
    case PolicyOperation::kTranslateX:
    case PolicyOperation::kTranslateY: {
      const int side = operation == PolicyOperation::kTranslateX ? image.width : image.height;
      // torchvision's end, 150.0 / 331.0 * side, is a Python double.
      const float end =
          space.translate_by_side ? static_cast<float>(150.0 / 331.0 * side) : space.translate;
      return LinspaceAt(0, end, bins, bin);
    }
    case PolicyOperation::kRotate:
      return LinspaceAt(0, space.rotate, bins, bin);
    case PolicyOperation::kBrightness:
    case PolicyOperation::kColor:
    case PolicyOperation::kContrast:
    case PolicyOperation::kSharpness:
      return LinspaceAt(0, space.enhance, bins, bin);
    case PolicyOperation::kPosterize: {
      const float step =
          static_cast<float>((bins - 1) / static_cast<double>(space.posterize_divisor));
      return std::nearbyint(8.0f - static_cast<float>(bin) / step);
    }
    case PolicyOperation::kSolarize:
      return LinspaceAt(1, 0, bins, bin);
    default:
      return 0;
  }
}

// _apply_image_or_video_transform with nearest-neighbour sampling.
void ApplyPolicyOperation(PolicyOperation operation, double magnitude, int fill, cv::Mat& image,
                          cv::Mat* mask, int ignore_index, MovingBoxes* boxes) {
  AffineParameters affine;
  switch (operation) {
    case PolicyOperation::kIdentity:
      return;
    case PolicyOperation::kShearX:
    case PolicyOperation::kShearY: {
      // About the top-left corner, as torchvision (center=[0, 0]).
      const double degrees = std::atan(magnitude) * 180 / CV_PI;
      (operation == PolicyOperation::kShearX ? affine.shear_x : affine.shear_y) = degrees;
      affine.has_center = true;
      break;
    }
    case PolicyOperation::kTranslateX:
      affine.translate_x = std::trunc(magnitude);
      break;
    case PolicyOperation::kTranslateY:
      affine.translate_y = std::trunc(magnitude);
      break;
    case PolicyOperation::kRotate:
      // F.rotate turns counter-clockwise, F.affine clockwise.
      affine.angle = -magnitude;
      break;
    case PolicyOperation::kBrightness:
      AdjustBrightnessImage(image, 1 + magnitude);
      return;
    case PolicyOperation::kColor:
      AdjustSaturationImage(image, 1 + magnitude);
      return;
    case PolicyOperation::kContrast:
      AdjustContrastImage(image, 1 + magnitude);
      return;
    case PolicyOperation::kSharpness:
      AdjustSharpnessImage(image, 1 + magnitude);
      return;
    case PolicyOperation::kPosterize:
      PosterizeImage(image, static_cast<int>(magnitude));
      return;
    case PolicyOperation::kSolarize:
      SolarizeImage(image, 255.0 * magnitude);
      return;
    case PolicyOperation::kAutoContrast:
      AutocontrastImage(image);
      return;
    case PolicyOperation::kEqualize:
      EqualizeImage(image);
      return;
  }
  const Affine moved = AffineImage(image, affine, fill, mask, ignore_index);
  if (boxes != nullptr) {
    boxes->Move(moved, image.size());
  }
}

class AugmentationPolicy final : public Transform {
 public:
  // RandAugment: `num_ops` operations at bin `magnitude`; TrivialAugmentWide
  // (random_bin): one operation at a random bin.
  AugmentationPolicy(const MagnitudeSpace& space, int num_ops, int magnitude, bool random_bin,
                     int bins, int fill)
      : space_(space),
        num_ops_(num_ops),
        magnitude_(magnitude),
        random_bin_(random_bin),
        bins_(bins),
        fill_(fill) {}

  void Apply(cv::Mat& image, CounterRng& rng) const override {
    ApplyWithTargets(image, nullptr, 0, nullptr, rng);
  }

  void ApplyWithTargets(cv::Mat& image, cv::Mat* mask, int ignore_index, MovingBoxes* boxes,
                        CounterRng& rng) const override {
    const cv::Size size = image.size();  // the magnitudes' size, as torchvision's
    for (int i = 0; i < num_ops_; ++i) {
      const auto operation = static_cast<PolicyOperation>(rng.Below(kPolicyOperations));
      double magnitude = 0;
      if (HasMagnitude(operation)) {
        const int bin = random_bin_ ? static_cast<int>(rng.Below(bins_)) : magnitude_;
        magnitude = Magnitude(space_, operation, bins_, bin, size);
        // torch.rand(()) <= 0.5
        if (Signed(operation) && rng.NextDouble() <= 0.5) {
          magnitude = -magnitude;
        }
      }
      ApplyPolicyOperation(operation, magnitude, fill_, image,
                           mask != nullptr && !mask->empty() ? mask : nullptr, ignore_index, boxes);
    }
  }

  // The costliest operation each time: sharpness (a copy, nine reads a
  // value, the blend).
  double Cost(cv::Size input) const override {
    return 11.0 * num_ops_ * static_cast<double>(input.width) * input.height;
  }

  std::string Spec() const override {
    if (random_bin_) {
      return absl::StrFormat("trivial_augment_wide(num_magnitude_bins=%d,fill=%d)", bins_, fill_);
    }
    return absl::StrFormat("rand_augment(num_ops=%d,magnitude=%d,num_magnitude_bins=%d,fill=%d)",
                           num_ops_, magnitude_, bins_, fill_);
  }

 private:
  MagnitudeSpace space_;
  int num_ops_;
  int magnitude_;
  bool random_bin_;
  int bins_;
  int fill_;
};

}  // namespace

std::unique_ptr<Transform> MakeRandAugment(int num_ops, int magnitude, int num_magnitude_bins,
                                           int fill) {
  return std::make_unique<AugmentationPolicy>(kRandAugmentSpace, num_ops, magnitude,
                                              /*random_bin=*/false, num_magnitude_bins, fill);
}

std::unique_ptr<Transform> MakeTrivialAugmentWide(int num_magnitude_bins, int fill) {
  return std::make_unique<AugmentationPolicy>(kTrivialAugmentWideSpace, 1, 0,
                                              /*random_bin=*/true, num_magnitude_bins, fill);
}

}  // namespace heterodl
