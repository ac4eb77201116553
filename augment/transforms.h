// The operations a Pipeline chains. Internal to augment/: users write specs.
#ifndef HETERODL_AUGMENT_TRANSFORMS_H_
#define HETERODL_AUGMENT_TRANSFORMS_H_

#include <memory>
#include <optional>
#include <string>

#include "augment/boxes.h"
#include "opencv2/core/mat.hpp"
#include "src/common/counter_rng.h"

namespace heterodl {

struct Range {
  double low;
  double high;
};

// What a transform needs of the image, when it can run fused with decoding:
// only `region` (full-resolution coordinates), to be brought to `output`.
struct RegionRequest {
  cv::Rect region;
  cv::Size output;
};

// The map of coordinates of a region step: `request.region` cut out, then
// scaled to `request.output`.
Affine RegionAffine(const RegionRequest& request);

class Transform {
 public:
  virtual ~Transform() = default;
  // For an operation that only needs part of the image at reduced scale
  // (crops, resizes) and comes first: the region it needs of an image of
  // `image_size`, drawing from `rng` exactly as Apply() would. nullopt when
  // it cannot run on a region.
  virtual std::optional<RegionRequest> PlanRegion(cv::Size image_size, CounterRng& rng) const {
    return std::nullopt;
  }
  // Whether PlanRegion() ever returns a region.
  virtual bool PlansRegions() const { return false; }
  // Completes the operation on the decoded `region` of the request (at any
  // scale at least as large as request.output), writing to `result`; a
  // `result` already of the output's size and type is written in place.
  virtual void ApplyToRegion(const cv::Mat& region, const RegionRequest& request,
                             cv::Mat& result) const {}
  // Transforms `image` (8-bit BGR) in place or by replacing it. Draws its
  // randomness from `rng`, in a fixed order, so results are reproducible.
  virtual void Apply(cv::Mat& image, CounterRng& rng) const = 0;
  // The same, with what moves with the image (each may be null): its
  // segmentation `mask` (class ids, 8 or 16 bits, the image's size) and its
  // detection `boxes`. A geometric operation moves the mask exactly as the
  // image, with nearest-neighbour sampling, filling what it pads or uncovers
  // with `ignore_index`, and the boxes by the same map of coordinates; a
  // photometric one (the default) leaves both alone. Draws what Apply()
  // draws, so the image is the same either way.
  virtual void ApplyWithTargets(cv::Mat& image, cv::Mat* mask, int ignore_index, MovingBoxes* boxes,
                                CounterRng& rng) const {
    Apply(image, rng);
  }
  // Output size when it is fixed regardless of the input, else {0, 0}.
  virtual cv::Size FixedOutputSize() const { return {0, 0}; }
  // The size Apply() makes of an image of `input` size: Run() checks it
  // against its pixel limit before the operation allocates anything.
  virtual cv::Size OutputSize(cv::Size input) const { return input; }
  // About how many pixel operations (pixels read or written, times passes
  // over them) Apply() makes on an image of `input` size, at most: what a
  // server bounds a pipeline's work per sample by (PipelineCost).
  virtual double Cost(cv::Size input) const = 0;
  // Canonical text form, e.g. "hflip(0.5)".
  virtual std::string Spec() const = 0;
};

// torchvision's RandomResizedCrop.get_params: ten tries at a random area
// fraction in `scale` and log-uniform aspect ratio in `ratio`, then a centred
// crop clamped to `ratio`.
cv::Rect RandomResizedCropRect(int width, int height, Range scale, Range ratio, CounterRng& rng);

// Sizes are cv::Size (width, height); specs write them "N" (square) or
// "HxW", as torchvision's (h, w).

// torchvision.transforms.RandomResizedCrop: a crop of random area fraction in
// `scale` and aspect ratio in `ratio` (log-uniform), resized to `size`.
std::unique_ptr<Transform> MakeRandomResizedCrop(cv::Size size, Range scale, Range ratio);
// torchvision.transforms.Resize(size): shorter side to `size`.
std::unique_ptr<Transform> MakeResize(int size);
// torchvision.transforms.Resize((h, w)): exactly that size.
std::unique_ptr<Transform> MakeResizeTo(cv::Size size);
// torchvision.transforms.CenterCrop(size), zero-padding a smaller image.
std::unique_ptr<Transform> MakeCenterCrop(cv::Size size);
// torchvision.transforms.v2.RandomCrop(size, padding, pad_if_needed, fill):
// `padding` pixels of `fill` on every border, then (pad_if_needed) a side
// still shorter than the crop padded by the difference on both ends, then a
// crop at a uniform offset (top drawn first). An image still smaller is
// centre-cropped with zero padding (torchvision raises).
std::unique_ptr<Transform> MakeRandomCrop(cv::Size size, int padding, bool pad_if_needed, int fill);
// torchvision.transforms.v2.RandomResize(min_size, max_size): the shorter
// side to an integer uniform in [min_size, max_size).
std::unique_ptr<Transform> MakeRandomResize(int min_size, int max_size);
// torchvision.transforms.v2.ScaleJitter(target_size, scale_range): scaled
// by min(target width / width, target height / height) x a factor uniform in
// `scale`, each side truncated. torchvision's target_size is (width,
// height); `target` here is a cv::Size, so the same.
std::unique_ptr<Transform> MakeScaleJitter(cv::Size target, Range scale);
// torchvision.transforms.RandomHorizontalFlip(p).
std::unique_ptr<Transform> MakeHorizontalFlip(double probability);

// torchvision.transforms.ColorJitter(brightness, contrast, saturation, hue):
// factors drawn uniformly from [max(0, 1 - x), 1 + x] (hue: [-hue, hue],
// hue <= 0.5), applied in a random order. Zero disables a component. With
// `probability` < 1, RandomApply([ColorJitter(...)], p): skipped unless a
// first draw falls under it (at 1 nothing extra is drawn).
std::unique_ptr<Transform> MakeColorJitter(double brightness, double contrast, double saturation,
                                           double hue, double probability = 1);
// torchvision.transforms.RandomGrayscale(p): ITU-R 601 luma in all channels.
std::unique_ptr<Transform> MakeRandomGrayscale(double probability);
// torchvision.transforms.GaussianBlur(kernel_size, sigma): sigma uniform in
// `sigma`; reflect padding. `probability` as ColorJitter's.
std::unique_ptr<Transform> MakeGaussianBlur(int kernel_size, Range sigma, double probability = 1);
// torchvision.transforms.RandomRotation(degrees): angle uniform in
// `degrees` (counter-clockwise), same size, nearest neighbour, zero fill.
std::unique_ptr<Transform> MakeRandomRotation(Range degrees);

// torchvision.transforms.v2.RandomAffine(degrees, translate, scale, shear,
// fill), nearest neighbour, about the centre: angle uniform in `degrees`;
// shifts int(round(uniform(-t, t) x side)) for `translate` (fractions of the
// width and height); scale uniform in `scale`; shear along x uniform in
// `shear` (degrees). Drawn in that order, each only when given (an empty
// range, low == high == 0, is not given, as torchvision's None).
struct AffineRanges {
  Range degrees{0, 0};
  double translate_x = 0;
  double translate_y = 0;
  std::optional<Range> scale;
  std::optional<Range> shear;
};
std::unique_ptr<Transform> MakeRandomAffine(const AffineRanges& ranges, int fill);

// The photometric operations of the self-supervised and DeiT recipes
// (color_transforms.cc), each applied with probability `probability`, drawn
// first, as torchvision.transforms.v2's Random* classes:
// RandomSolarize(threshold, p), RandomPosterize(bits, p), RandomEqualize(p),
// RandomAutocontrast(p), RandomAdjustSharpness(sharpness_factor, p).
std::unique_ptr<Transform> MakeRandomSolarize(double threshold, double probability);
std::unique_ptr<Transform> MakeRandomPosterize(int bits, double probability);
std::unique_ptr<Transform> MakeRandomEqualize(double probability);
std::unique_ptr<Transform> MakeRandomAutocontrast(double probability);
std::unique_ptr<Transform> MakeRandomAdjustSharpness(double sharpness_factor, double probability);

// torchvision.transforms.v2.RandomErasing(p, scale, ratio, value): with
// probability p, a rectangle of area fraction uniform in `scale` and aspect
// ratio log-uniform in `ratio` (ten tries to fit strictly inside, else
// nothing) set to `value`, or to uniform random bytes when `random_value`
// (torchvision's value="random" draws normal floats, meant for normalized
// float images; a uint8 image takes noise over its whole range).
std::unique_ptr<Transform> MakeRandomErasing(double probability, Range scale, Range ratio,
                                             int value, bool random_value);

// torchvision.transforms.v2.RandAugment(num_ops, magnitude,
// num_magnitude_bins, fill) and TrivialAugmentWide(num_magnitude_bins,
// fill) (auto_augment.cc): torchvision's operation lists and magnitude bins,
// nearest-neighbour geometry, in torchvision's order of draws.
std::unique_ptr<Transform> MakeRandAugment(int num_ops, int magnitude, int num_magnitude_bins,
                                           int fill);
std::unique_ptr<Transform> MakeTrivialAugmentWide(int num_magnitude_bins, int fill);

// Resizes with bilinear interpolation, after halving (2:1 box filter) each
// dimension more than twice its target, so shrinking is antialiased.
// Writes into `destination` in place when it already has the size and type.
void ResizeTo(const cv::Mat& source, cv::Size size, cv::Mat& destination);

// Resizes a segmentation mask as torchvision resizes a Mask: nearest
// neighbour, the source pixel floor(destination x scale); class ids are
// never blended. In place (replacing `mask`) unless it has `size` already.
void ResizeMask(cv::Mat& mask, cv::Size size);

// The size ResizeTo's halvings bring `source` to before its bilinear step
// towards `target`: a decoder that shrinks by area averaging can stop there
// and leave the same last step to ResizeTo.
cv::Size HalvedSize(cv::Size source, cv::Size target);

}  // namespace heterodl

#endif  // HETERODL_AUGMENT_TRANSFORMS_H_
