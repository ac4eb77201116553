#include "augment/image_ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "opencv2/core.hpp"
#include "opencv2/core/hal/intrin.hpp"
#include "opencv2/imgproc.hpp"

namespace heterodl {
namespace {

using Table = std::array<uint8_t, 256>;

// torchvision converts a float32 result to uint8 after clamping: truncation.
uint8_t ClampToByte(float value) { return static_cast<uint8_t>(std::clamp(value, 0.0f, 255.0f)); }

void ApplyTable(cv::Mat& image, const Table& table) {
  cv::LUT(image, cv::Mat(1, 256, CV_8UC1, const_cast<uint8_t*>(table.data())), image);
}

// One table per channel.
void ApplyTables(cv::Mat& image, const std::array<Table, 3>& tables) {
  for (int y = 0; y < image.rows; ++y) {
    uint8_t* pixel = image.ptr<uint8_t>(y);
    for (int x = 0; x < image.cols; ++x, pixel += 3) {
      pixel[0] = tables[0][pixel[0]];
      pixel[1] = tables[1][pixel[1]];
      pixel[2] = tables[2][pixel[2]];
    }
  }
}

std::array<std::array<int64_t, 256>, 3> Histograms(const cv::Mat& image) {
  std::array<std::array<int64_t, 256>, 3> histograms{};
  for (int y = 0; y < image.rows; ++y) {
    const uint8_t* pixel = image.ptr<uint8_t>(y);
    for (int x = 0; x < image.cols; ++x, pixel += 3) {
      ++histograms[0][pixel[0]];
      ++histograms[1][pixel[1]];
      ++histograms[2][pixel[2]];
    }
  }
  return histograms;
}

// torchvision's luma in float32 (kLumaWeights), floored (uint8 images).
float FlooredLuma(const uint8_t* pixel) {
  return std::floor(static_cast<float>(pixel[0]) * kLumaWeights[0] +
                    static_cast<float>(pixel[1]) * kLumaWeights[1] +
                    static_cast<float>(pixel[2]) * kLumaWeights[2]);
}

// _blend(image, other, ratio): image * ratio + other * (1 - ratio), float32.
float Blend(float value, float other, float ratio, float other_ratio) {
  return value * ratio + other * other_ratio;
}

}  // namespace

void SolarizeImage(cv::Mat& image, double threshold) {
  // torch compares a uint8 image with a Python float in float32: a
  // threshold of 255 x 0.6f is 153.000006 as a double but 153 as a float.
  const auto limit = static_cast<float>(threshold);
  Table table;
  for (int v = 0; v < 256; ++v) {
    table[v] = static_cast<uint8_t>(static_cast<float>(v) >= limit ? 255 - v : v);
  }
  ApplyTable(image, table);
}

void PosterizeImage(cv::Mat& image, int bits) {
  if (bits >= 8) {
    return;
  }
  const int mask = ((1 << bits) - 1) << (8 - bits);
  Table table;
  for (int v = 0; v < 256; ++v) {
    table[v] = static_cast<uint8_t>(v & mask);
  }
  ApplyTable(image, table);
}

void EqualizeImage(cv::Mat& image) {
  const auto histograms = Histograms(image);
  const int64_t pixels = static_cast<int64_t>(image.rows) * image.cols;
  std::array<Table, 3> tables;
  for (int c = 0; c < 3; ++c) {
    const std::array<int64_t, 256>& histogram = histograms[c];
    Table& table = tables[c];
    int last = 255;
    while (last > 0 && histogram[last] == 0) {
      --last;
    }
    // The pixels not of the highest value present, spread over 255 steps;
    // none to spread leaves the channel as it is.
    const int64_t step = (pixels - histogram[last]) / 255;
    if (step == 0) {
      for (int v = 0; v < 256; ++v) {
        table[v] = static_cast<uint8_t>(v);
      }
      continue;
    }
    table[0] = 0;
    int64_t cumulative = 0;
    for (int v = 1; v < 256; ++v) {
      cumulative += histogram[v - 1];
      table[v] = static_cast<uint8_t>(std::min<int64_t>(255, (cumulative + step / 2) / step));
    }
  }
  ApplyTables(image, tables);
}

void AutocontrastImage(cv::Mat& image) {
  std::array<Table, 3> tables;
  std::vector<cv::Mat> planes;
  cv::split(image, planes);
  for (int c = 0; c < 3; ++c) {
    double low = 0;
    double high = 0;
    cv::minMaxLoc(planes[c], &low, &high);
    float minimum = static_cast<float>(low);
    float inverse_scale = (static_cast<float>(high) - minimum) * static_cast<float>(1.0 / 255.0);
    if (high == low) {
      minimum = 0;
      inverse_scale = 1;
    }
    for (int v = 0; v < 256; ++v) {
      tables[c][v] = ClampToByte((static_cast<float>(v) - minimum) / inverse_scale);
    }
  }
  ApplyTables(image, tables);
}

void AdjustSharpnessImage(cv::Mat& image, double factor) {
  if (image.rows <= 2 || image.cols <= 2) {
    return;
  }
  const float edge = 1.0f / 13.0f;
  const float middle = 5.0f / 13.0f;
  const float alpha = static_cast<float>(1.0 - factor);
  cv::Mat source = image.clone();
  for (int y = 1; y + 1 < image.rows; ++y) {
    const uint8_t* above = source.ptr<uint8_t>(y - 1);
    const uint8_t* row = source.ptr<uint8_t>(y);
    const uint8_t* below = source.ptr<uint8_t>(y + 1);
    uint8_t* out = image.ptr<uint8_t>(y);
    for (int x = 3; x + 3 < image.cols * 3; ++x) {
      const float neighbours =
          static_cast<float>(above[x - 3] + above[x] + above[x + 3] + row[x - 3] + row[x + 3] +
                             below[x - 3] + below[x] + below[x + 3]);
      const float smoothed =
          std::nearbyint(neighbours * edge + static_cast<float>(row[x]) * middle);
      const float value = static_cast<float>(row[x]);
      out[x] = ClampToByte(value + alpha * (smoothed - value));
    }
  }
}

void AdjustBrightnessImage(cv::Mat& image, double factor) {
  Table table;
  for (int v = 0; v < 256; ++v) {
    table[v] = ClampToByte(static_cast<float>(v) * static_cast<float>(factor));
  }
  ApplyTable(image, table);
}

void AdjustContrastImage(cv::Mat& image, double factor) {
  double sum = 0;
  for (int y = 0; y < image.rows; ++y) {
    const uint8_t* pixel = image.ptr<uint8_t>(y);
    for (int x = 0; x < image.cols; ++x, pixel += 3) {
      sum += FlooredLuma(pixel);
    }
  }
  const float mean = static_cast<float>(sum / std::max(1, image.rows * image.cols));
  const float ratio = static_cast<float>(factor);
  const float other_ratio = static_cast<float>(1.0 - factor);
  Table table;
  for (int v = 0; v < 256; ++v) {
    table[v] = ClampToByte(Blend(static_cast<float>(v), mean, ratio, other_ratio));
  }
  ApplyTable(image, table);
}

void AdjustSaturationImage(cv::Mat& image, double factor) {
  const float ratio = static_cast<float>(factor);
  const float other_ratio = static_cast<float>(1.0 - factor);
  for (int y = 0; y < image.rows; ++y) {
    uint8_t* pixel = image.ptr<uint8_t>(y);
    for (int x = 0; x < image.cols; ++x, pixel += 3) {
      const float gray = FlooredLuma(pixel);
      for (int c = 0; c < 3; ++c) {
        pixel[c] = ClampToByte(Blend(static_cast<float>(pixel[c]), gray, ratio, other_ratio));
      }
    }
  }
}

namespace {

// The hue rotation in integers. A pixel's hue is its position on the
// hexagon of the six sectors where one channel is largest and one smallest:
// 0..6c, c = max - min, kept in sixteenths (at most 16 x 6 x 255 = 24480, so
// it fits int16 lanes). Rotating moves that position; the largest and
// smallest values stay. Each channel then takes max - d, d its distance
// from its own full sector, clamped to [0, c]: that is hsv_to_rgb's choice
// among v, p, t and q without choosing, and its rounding matches
// torchvision's float32 arithmetic within 1.
struct HueRotation {
  // 6 x factor in 1/8192ths: a pixel of range c moves (128c x shift) >> 16
  // sixteenths.
  int16_t shift;
  // Forward rotations take a whole turn off first, so that every
  // intermediate stays within int16.
  bool forward;
};

HueRotation MakeHueRotation(double factor) {
  const double shift = std::clamp(6 * factor, -3.0, 3.0) * 8192;
  return {static_cast<int16_t>(std::lround(shift)), shift > 0};
}

// Where each channel's value is largest, in units of c before its turn:
// red at 0 (sectors 5 and 0), green at 2, blue at 4; stored as how far
// back from a whole turn a channel's distance is measured (6 - 1, 6 - 3,
// 6 - 5 units).
constexpr int kChannelOffset[3] = {1, 3, 5};

void RotateHuePixel(uint8_t* pixel, HueRotation rotation) {
  const int r = pixel[0], g = pixel[1], b = pixel[2];
  const int largest = std::max({r, g, b});
  const int smallest = std::min({r, g, b});
  const int range = largest - smallest;
  int position;  // in units of c: torchvision's h x 6
  if (largest == r) {
    position = g - b < 0 ? g - b + 6 * range : g - b;
  } else if (largest == g) {
    position = 2 * range + b - r;
  } else {
    position = 4 * range + r - g;
  }
  const int unit = 16 * range;
  const int turn = 6 * unit;
  const int shift = ((128 * range * rotation.shift) >> 16) - (rotation.forward ? turn : 0);
  int moved = 16 * position + shift;
  moved += moved < 0 ? turn : 0;
  for (int channel = 0; channel < 3; ++channel) {
    int along = moved - kChannelOffset[channel] * unit;
    along += along < 0 ? turn : 0;
    const int distance = std::clamp(std::min(along, 4 * unit - along), 0, unit);
    // torchvision's float-to-uint8 conversion, x * 255.999 truncated, on a
    // value in sixteenths: (8v x 514) >> 16 is v / 16 x 1.0039.
    pixel[channel] = static_cast<uint8_t>(((16 * largest - distance) * 8 * 514) >> 16);
  }
}

#if CV_SIMD
// RotateHuePixel on a vector of pixels, the same integers lane by lane.
void RotateHueLanes(cv::v_int16 (&rgb)[3], HueRotation rotation) {
  using cv::v_int16;
  const v_int16 zero = cv::vx_setzero_s16();
  const v_int16& r = rgb[0];
  const v_int16& g = rgb[1];
  const v_int16& b = rgb[2];
  const v_int16 largest = cv::v_max(r, cv::v_max(g, b));
  const v_int16 range = largest - cv::v_min(r, cv::v_min(g, b));
  const v_int16 range2 = range + range;
  const v_int16 range6 = range2 + range2 + range2;
  const v_int16 red_position = g - b;
  const v_int16 from_red = red_position + (range6 & (red_position < zero));
  const v_int16 from_green = range2 + b - r;
  const v_int16 from_blue = range2 + range2 + r - g;
  const v_int16 position =
      cv::v_select(largest == r, from_red, cv::v_select(largest == g, from_green, from_blue));
  const v_int16 unit = cv::v_shl<4>(range);
  const v_int16 turn = cv::v_shl<4>(range6);
  v_int16 shift = cv::v_mul_hi(cv::v_shl<7>(range), cv::vx_setall_s16(rotation.shift));
  if (rotation.forward) {
    shift = shift - turn;
  }
  v_int16 moved = cv::v_shl<4>(position) + shift;
  moved = moved + (turn & (moved < zero));
  const v_int16 unit3 = unit + unit + unit;
  const v_int16 offsets[3] = {unit, unit3, unit3 + unit + unit};
  const v_int16 unit4 = cv::v_shl<2>(unit);
  const v_int16 high = cv::v_shl<4>(largest);
  const v_int16 to_byte = cv::vx_setall_s16(514);
  for (int channel = 0; channel < 3; ++channel) {
    v_int16 along = moved - offsets[channel];
    along = along + (turn & (along < zero));
    const v_int16 distance = cv::v_min(cv::v_max(cv::v_min(along, unit4 - along), zero), unit);
    rgb[channel] = cv::v_mul_hi(cv::v_shl<3>(high - distance), to_byte);
  }
}
#endif

}  // namespace

void AdjustHueImage(cv::Mat& image, double factor) {
  const HueRotation rotation = MakeHueRotation(factor);
  for (int y = 0; y < image.rows; ++y) {
    uint8_t* row = image.ptr<uint8_t>(y);
    int x = 0;
#if CV_SIMD
    const int lanes = cv::v_uint8::nlanes;
    for (; x + lanes <= image.cols; x += lanes) {
      uint8_t* pixels = row + static_cast<ptrdiff_t>(3) * x;
      cv::v_uint8 bytes[3];
      cv::v_load_deinterleave(pixels, bytes[0], bytes[1], bytes[2]);
      cv::v_int16 low[3], high[3];
      for (int c = 0; c < 3; ++c) {
        cv::v_uint16 wide_low, wide_high;
        cv::v_expand(bytes[c], wide_low, wide_high);
        low[c] = cv::v_reinterpret_as_s16(wide_low);
        high[c] = cv::v_reinterpret_as_s16(wide_high);
      }
      RotateHueLanes(low, rotation);
      RotateHueLanes(high, rotation);
      cv::v_store_interleave(pixels, cv::v_pack_u(low[0], high[0]), cv::v_pack_u(low[1], high[1]),
                             cv::v_pack_u(low[2], high[2]));
    }
#endif
    for (; x < image.cols; ++x) {
      RotateHuePixel(row + static_cast<ptrdiff_t>(3) * x, rotation);
    }
  }
}

Affine AffineImage(cv::Mat& image, const AffineParameters& parameters, int fill, cv::Mat* mask,
                   int mask_fill) {
  const int width = image.cols;
  const int height = image.rows;
  // torchvision's inverse matrix (output to input), in coordinates centred
  // on the image: _get_inverse_affine_matrix.
  const double center_x = parameters.has_center ? parameters.center_x - width * 0.5 : 0;
  const double center_y = parameters.has_center ? parameters.center_y - height * 0.5 : 0;
  const double rotation = parameters.angle * CV_PI / 180;
  const double shear_x = parameters.shear_x * CV_PI / 180;
  const double shear_y = parameters.shear_y * CV_PI / 180;
  const double a = std::cos(rotation - shear_y) / std::cos(shear_y);
  const double b =
      -std::cos(rotation - shear_y) * std::tan(shear_x) / std::cos(shear_y) - std::sin(rotation);
  const double c = std::sin(rotation - shear_y) / std::cos(shear_y);
  const double d =
      -std::sin(rotation - shear_y) * std::tan(shear_x) / std::cos(shear_y) + std::cos(rotation);
  double m[6] = {d / parameters.scale,  -b / parameters.scale, 0,
                 -c / parameters.scale, a / parameters.scale,  0};
  const double tx = -center_x - parameters.translate_x;
  const double ty = -center_y - parameters.translate_y;
  m[2] += m[0] * tx + m[1] * ty + center_x;
  m[5] += m[3] * tx + m[4] * ty + center_y;

  // The sampling grid as torchvision builds it in float32 (_affine_grid,
  // then grid_sample's unnormalization with align_corners=False), so that
  // nearest-neighbour ties go the same way; remap rounds half to even, as
  // grid_sample does.
  float theta[6];
  for (int i = 0; i < 6; ++i) {
    theta[i] = static_cast<float>(m[i]);
  }
  const float half_width = 0.5f * static_cast<float>(width);
  const float half_height = 0.5f * static_cast<float>(height);
  const float gx[3] = {theta[0] / half_width, theta[1] / half_width, theta[2] / half_width};
  const float gy[3] = {theta[3] / half_height, theta[4] / half_height, theta[5] / half_height};
  // In bands of rows, so the maps stay small whatever the image's size.
  constexpr int kBandRows = 32;
  cv::Mat warped(image.size(), image.type());
  cv::Mat moved;
  if (mask != nullptr) {
    moved.create(mask->size(), mask->type());
  }
  cv::Mat map_x(std::min(kBandRows, height), width, CV_32FC1);
  cv::Mat map_y(map_x.size(), CV_32FC1);
  for (int band = 0; band < height; band += kBandRows) {
    const int rows = std::min(kBandRows, height - band);
    for (int r = 0; r < rows; ++r) {
      const float y = static_cast<float>(band + r) + (1.0f - static_cast<float>(height)) * 0.5f;
      float* out_x = map_x.ptr<float>(r);
      float* out_y = map_y.ptr<float>(r);
      for (int column = 0; column < width; ++column) {
        const float x = static_cast<float>(column) + (1.0f - static_cast<float>(width)) * 0.5f;
        const float grid_x = x * gx[0] + y * gx[1] + gx[2];
        const float grid_y = x * gy[0] + y * gy[1] + gy[2];
        out_x[column] = ((grid_x + 1) * static_cast<float>(width) - 1) / 2;
        out_y[column] = ((grid_y + 1) * static_cast<float>(height) - 1) / 2;
      }
    }
    const cv::Rect rows_of_band(0, 0, width, rows);
    const cv::Rect output_band(0, band, width, rows);
    cv::Mat out_band = warped(output_band);
    cv::remap(image, out_band, map_x(rows_of_band), map_y(rows_of_band), cv::INTER_NEAREST,
              cv::BORDER_CONSTANT, cv::Scalar::all(fill));
    if (mask != nullptr) {
      cv::Mat mask_band = moved(output_band);
      cv::remap(*mask, mask_band, map_x(rows_of_band), map_y(rows_of_band), cv::INTER_NEAREST,
                cv::BORDER_CONSTANT, cv::Scalar::all(mask_fill));
    }
  }
  image = warped;
  if (mask != nullptr) {
    *mask = moved;
  }
  // For boxes: the same map in continuous coordinates (a pixel's centre is
  // its index + 0.5), centred, inverted to run input to output.
  const Affine output_to_input(
      m[0], m[1], m[2] + width * 0.5 - m[0] * width * 0.5 - m[1] * height * 0.5, m[3], m[4],
      m[5] + height * 0.5 - m[3] * width * 0.5 - m[4] * height * 0.5);
  Affine input_to_output;
  cv::invertAffineTransform(output_to_input, input_to_output);
  return input_to_output;
}

float LinspaceAt(float start, float end, int steps, int index) {
  if (steps == 1) {
    return start;
  }
  // ATen's kernel: from the start for the first half, from the end for the
  // second, each a fused multiply-add (vectorized): one rounding, not two.
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int halfway = steps / 2;
  return index < halfway ? std::fma(step, static_cast<float>(index), start)
                         : std::fma(-step, static_cast<float>(steps - index - 1), end);
}

}  // namespace heterodl
