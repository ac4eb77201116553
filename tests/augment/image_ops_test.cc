#include "augment/image_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>

#include "gtest/gtest.h"
#include "opencv2/core.hpp"

namespace heterodl {
namespace {

// torchvision.transforms.v2.functional.adjust_hue_image on one uint8 pixel,
// step by step as its _rgb_to_hsv and _hsv_to_rgb compute in float32.
void TorchvisionAdjustHue(const uint8_t* in, uint8_t* out, double factor) {
  float rgb[3];
  for (int c = 0; c < 3; ++c) {
    rgb[c] = static_cast<float>(in[c]) * static_cast<float>(1.0 / 255);
  }
  const float r = rgb[0], g = rgb[1], b = rgb[2];
  const float maxc = std::max({r, g, b});
  const float minc = std::min({r, g, b});
  const bool equal = maxc == minc;
  const float range = maxc - minc;
  const float s = range / (equal ? 1.0f : maxc);
  const float divisor = equal ? 1.0f : range;
  const float rc = (maxc - r) / divisor, gc = (maxc - g) / divisor, bc = (maxc - b) / divisor;
  const bool not_red = maxc != r;
  const bool green = maxc == g;
  const float hg = (rc + 2.0f - bc) * static_cast<float>(green && not_red);
  const float hr = (bc - gc) * static_cast<float>(!not_red);
  const float hb = (gc + 4.0f - rc) * static_cast<float>(not_red && !green);
  float h = std::fmod((hr + hg + hb) * static_cast<float>(1.0 / 6.0) + 1.0f, 1.0f);
  h = h + static_cast<float>(factor);
  h = h - std::floor(h);  // remainder_(1.0)
  const float h6 = h * 6.0f;
  const float i = std::floor(h6);
  const float f = h6 - i;
  const int sector = ((static_cast<int>(i) % 6) + 6) % 6;
  const float sxf = s * f;
  const float one_minus_s = 1.0f - s;
  const float v = maxc;
  const float q = std::clamp((1.0f - sxf) * v, 0.0f, 1.0f);
  const float t = std::clamp((sxf + one_minus_s) * v, 0.0f, 1.0f);
  const float p = std::clamp(one_minus_s * v, 0.0f, 1.0f);
  const float vpqt[4] = {v, p, q, t};
  static constexpr int kSelect[3][6] = {{0, 2, 1, 1, 3, 0}, {3, 0, 0, 2, 1, 1}, {1, 1, 3, 0, 0, 2}};
  for (int c = 0; c < 3; ++c) {
    out[c] = static_cast<uint8_t>(vpqt[kSelect[c][sector]] * static_cast<float>(255 + 1.0 - 1e-3));
  }
}

// Random pixels, plus the ties where two or three channels are equal.
cv::Mat HuePixels(int width) {
  std::mt19937 random(7);
  std::uniform_int_distribution<int> value(0, 255);
  cv::Mat image(8, width, CV_8UC3);
  for (int y = 0; y < image.rows; ++y) {
    for (int x = 0; x < image.cols; ++x) {
      auto* pixel = image.ptr<uint8_t>(y, x);
      for (int c = 0; c < 3; ++c) {
        pixel[c] = static_cast<uint8_t>(value(random));
      }
      if (y == 1) {
        pixel[1] = pixel[0];  // r == g
      } else if (y == 2) {
        pixel[2] = pixel[1];  // g == b
      } else if (y == 3) {
        pixel[2] = pixel[0];  // r == b
      } else if (y == 4) {
        pixel[1] = pixel[2] = pixel[0];  // gray
      } else if (y == 5) {
        pixel[x % 3] = 255;  // a channel at the top
        pixel[(x + 1) % 3] = 0;
      }
    }
  }
  return image;
}

TEST(ImageOpsTest, AdjustHueIsWithinOneOfTorchvision) {
  // 1,003 pixels a row: 62 blocks of sixteen and a tail of eleven.
  const cv::Mat original = HuePixels(1003);
  for (double factor : {-0.5, -0.37, -0.25, -0.1, -0.01, -1e-4, 0.0, 1e-4, 0.03, 0.1, 0.19, 1.0 / 6,
                        0.25, 0.42, 0.5}) {
    cv::Mat image = original.clone();
    AdjustHueImage(image, factor);
    int64_t exact = 0;
    int64_t values = 0;
    for (int y = 0; y < image.rows; ++y) {
      for (int x = 0; x < image.cols; ++x) {
        uint8_t expected[3];
        TorchvisionAdjustHue(original.ptr<uint8_t>(y, x), expected, factor);
        const uint8_t* got = image.ptr<uint8_t>(y, x);
        for (int c = 0; c < 3; ++c) {
          ASSERT_LE(std::abs(got[c] - expected[c]), 1)
              << "factor " << factor << " at (" << x << ", " << y << ") channel " << c;
          exact += got[c] == expected[c] ? 1 : 0;
          ++values;
        }
      }
    }
    EXPECT_GT(static_cast<double>(exact) / static_cast<double>(values), 0.97) << factor;
    if (factor == 0.0) {
      EXPECT_EQ(cv::norm(image, original, cv::NORM_INF), 0);
    }
  }
}

TEST(ImageOpsTest, AdjustHueGivesEveryPixelTheSameWhereverItSits) {
  // Sixteen pixels at a time in vector lanes, the rest one by one: a pixel
  // comes out the same either way.
  const cv::Mat original = HuePixels(64);
  for (double factor : {-0.43, 0.07, 0.5}) {
    cv::Mat whole = original.clone();
    AdjustHueImage(whole, factor);
    for (int y = 0; y < original.rows; ++y) {
      for (int x = 0; x < original.cols; ++x) {
        cv::Mat alone = original(cv::Rect(x, y, 1, 1)).clone();
        AdjustHueImage(alone, factor);
        ASSERT_EQ(alone.at<cv::Vec3b>(0, 0), whole.at<cv::Vec3b>(y, x))
            << "at (" << x << ", " << y << "), " << original.at<cv::Vec3b>(y, x);
      }
    }
  }
}

TEST(ImageOpsTest, AdjustHueHandlesEmptyAndTinyImages) {
  cv::Mat empty;
  AdjustHueImage(empty, 0.2);
  EXPECT_TRUE(empty.empty());
  cv::Mat red(1, 1, CV_8UC3, cv::Scalar(255, 0, 0));
  AdjustHueImage(red, 1.0 / 3);  // a third of a turn: red becomes green
  EXPECT_EQ(red.at<cv::Vec3b>(0, 0), cv::Vec3b(0, 255, 0));
}

}  // namespace
}  // namespace heterodl
