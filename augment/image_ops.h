// torchvision.transforms.v2.functional's kernels on uint8 RGB images, with
// its arithmetic: what the random operations (transforms.h) and the
// augmentation policies (auto_augment.h) apply once they have drawn their
// parameters. Internal to augment/.
//
// Each takes an 8-bit, 3-channel cv::Mat of any size (1x1 included) and
// changes it in place or replaces it. Where torchvision computes in float32
// and truncates to uint8, these do too (per-value tables where the result
// depends on the value alone), so outputs match bit for bit or within 1.
#ifndef HETERODL_AUGMENT_IMAGE_OPS_H_
#define HETERODL_AUGMENT_IMAGE_OPS_H_

#include "augment/boxes.h"
#include "opencv2/core/mat.hpp"

namespace heterodl {

// torchvision's luma weights (r, g, b), ITU-R 601-2 as rgb_to_grayscale
// computes it in float32.
inline constexpr float kLumaWeights[3] = {0.2989f, 0.587f, 0.114f};

// F.solarize: every value >= threshold inverted (255 - v).
void SolarizeImage(cv::Mat& image, double threshold);
// F.posterize: each value keeps its `bits` (0..8) highest bits.
void PosterizeImage(cv::Mat& image, int bits);
// F.equalize: each channel's histogram equalized as PIL's ImageOps does.
void EqualizeImage(cv::Mat& image);
// F.autocontrast: each channel stretched from its [min, max] to [0, 255].
void AutocontrastImage(cv::Mat& image);
// F.adjust_sharpness: blended with its 3x3 smoothed self (weights 1 and 5
// over 13), `factor` 1 the original, 0 the smoothed; the border unchanged.
void AdjustSharpnessImage(cv::Mat& image, double factor);
// F.adjust_brightness, F.adjust_contrast (blend with the mean of the floored
// luma) and F.adjust_saturation (blend with each pixel's floored luma).
void AdjustBrightnessImage(cv::Mat& image, double factor);
void AdjustContrastImage(cv::Mat& image, double factor);
void AdjustSaturationImage(cv::Mat& image, double factor);
// F.adjust_hue: the HSV hue rotated by `factor` turns (-0.5..0.5). Each
// pixel keeps its largest and smallest values and moves its middle one, as
// torchvision's float32 round trip through HSV does; computed in 1/16ths of
// a value, so outputs are within 1 of torchvision's.
void AdjustHueImage(cv::Mat& image, double factor);

// F.affine's parameters: about the centre of the image, or of `center`
// (pixel coordinates) when has_center; shear in degrees along x and y.
struct AffineParameters {
  double angle = 0;  // degrees, clockwise as F.affine takes it
  double translate_x = 0;
  double translate_y = 0;
  double scale = 1;
  double shear_x = 0;
  double shear_y = 0;
  bool has_center = false;
  double center_x = 0;
  double center_y = 0;
};

// F.affine with nearest-neighbour sampling: `image` (and `mask`, when not
// null, filled with `mask_fill`) warped in place, uncovered pixels `fill`;
// returns the map of coordinates it applied, for boxes.
Affine AffineImage(cv::Mat& image, const AffineParameters& parameters, int fill, cv::Mat* mask,
                   int mask_fill);

// torch.linspace(start, end, steps)[index] as float32 computes it (the
// policies' magnitude bins).
float LinspaceAt(float start, float end, int steps, int index);

}  // namespace heterodl

#endif  // HETERODL_AUGMENT_IMAGE_OPS_H_
