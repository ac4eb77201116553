// The operations a Pipeline chains. Internal to augment/: users write specs.
#ifndef HETERODL_AUGMENT_TRANSFORMS_H_
#define HETERODL_AUGMENT_TRANSFORMS_H_

#include <memory>
#include <string>

#include "opencv2/core/mat.hpp"
#include "src/common/counter_rng.h"

namespace heterodl {

class Transform {
 public:
  virtual ~Transform() = default;
  // Transforms `image` (8-bit BGR) in place or by replacing it. Draws its
  // randomness from `rng`, in a fixed order, so results are reproducible.
  virtual void Apply(cv::Mat& image, CounterRng& rng) const = 0;
  // Output size when it is fixed regardless of the input, else {0, 0}.
  virtual cv::Size FixedOutputSize() const { return {0, 0}; }
  // Canonical text form, e.g. "hflip(0.5)".
  virtual std::string Spec() const = 0;
};

struct Range {
  double low;
  double high;
};

// torchvision.transforms.RandomResizedCrop: a crop of random area fraction in
// `scale` and aspect ratio in `ratio` (log-uniform), resized to size x size.
std::unique_ptr<Transform> MakeRandomResizedCrop(int size, Range scale, Range ratio);
// torchvision.transforms.Resize(size): shorter side to `size`.
std::unique_ptr<Transform> MakeResize(int size);
// torchvision.transforms.CenterCrop(size), zero-padding a smaller image.
std::unique_ptr<Transform> MakeCenterCrop(int size);
// torchvision.transforms.RandomHorizontalFlip(p).
std::unique_ptr<Transform> MakeHorizontalFlip(double probability);

// Resizes with area averaging when shrinking (like an antialiased resize) and
// bilinear interpolation when enlarging.
void ResizeTo(const cv::Mat& source, cv::Size size, cv::Mat& destination);

}  // namespace heterodl

#endif  // HETERODL_AUGMENT_TRANSFORMS_H_
