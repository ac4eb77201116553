#include "tests/testing/test_images.h"

#include <unistd.h>

#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"
#include "opencv2/imgproc.hpp"

namespace heterodl::testing {

std::string MakeJpeg(int width, int height, int seed) {
  cv::Mat image(height, width, CV_8UC3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      image.at<cv::Vec3b>(y, x) = cv::Vec3b(static_cast<uint8_t>((x * 3 + seed * 40) & 255),
                                            static_cast<uint8_t>((y * 2 + seed * 70) & 255),
                                            static_cast<uint8_t>(((x + y) + seed * 13) & 255));
    }
  }
  std::vector<uint8_t> encoded;
  cv::imencode(".jpg", image, encoded, {cv::IMWRITE_JPEG_QUALITY, 90});
  return std::string(encoded.begin(), encoded.end());
}

std::string WithExifOrientation(const std::string& jpeg, int orientation) {
  // Big-endian TIFF header, IFD0 at offset 8 with one entry: tag 0x0112,
  // type SHORT, count 1, the value in the entry's first two value bytes.
  const std::string tiff = std::string("MM\0*\0\0\0\x08", 8) + std::string("\0\x01", 2) +
                           std::string("\x01\x12\0\x03\0\0\0\x01\0", 9) +
                           static_cast<char>(orientation) + std::string(2, '\0') +
                           std::string(4, '\0');
  const std::string payload = std::string("Exif\0\0", 6) + tiff;
  const size_t length = payload.size() + 2;
  const std::string app1 = std::string("\xFF\xE1", 2) + static_cast<char>(length >> 8) +
                           static_cast<char>(length & 255) + payload;
  return jpeg.substr(0, 2) + app1 + jpeg.substr(2);
}

std::filesystem::path MakeTempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::filesystem::path dir = std::filesystem::path(base != nullptr ? base : "/tmp") /
                              absl::StrCat("heterodl-test-", getpid(), "-", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void WriteFile(const std::filesystem::path& path, const std::string& contents) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << contents;
}

std::filesystem::path MakeImageFolder(const std::string& name, int classes, int per_class) {
  std::filesystem::path root = MakeTempDir(name);
  int seed = 0;
  for (int c = 0; c < classes; ++c) {
    for (int i = 0; i < per_class; ++i, ++seed) {
      WriteFile(root / absl::StrCat("class", c) / absl::StrCat("img", i, ".jpg"),
                MakeJpeg(64 + 8 * (seed % 5), 48 + 8 * (seed % 3), seed));
    }
  }
  return root;
}

std::filesystem::path MakePaintedSegmentationFolder(const std::string& name, int count,
                                                    uint64_t seed, bool sixteen_bit) {
  std::filesystem::path root = MakeTempDir(name);
  std::filesystem::create_directories(root / "images");
  std::filesystem::create_directories(root / "masks");
  cv::RNG rng(seed);
  for (int n = 0; n < count; ++n) {
    const int width = rng.uniform(56, 89);
    const int height = rng.uniform(40, 73);
    const auto colour = [](int id) {
      return cv::Scalar(kPaintedColours[id][2], kPaintedColours[id][1], kPaintedColours[id][0]);
    };
    cv::Mat image(height, width, CV_8UC3, colour(0));  // BGR, as imwrite takes
    cv::Mat ids(height, width, CV_16UC1, cv::Scalar(0));
    const auto id = [&](int value) {
      return cv::Scalar(value * (sixteen_bit ? kSixteenBitIdScale : 1));
    };
    const cv::Point corner(rng.uniform(0, width / 2), rng.uniform(0, height / 2));
    const cv::Point opposite(corner.x + rng.uniform(8, width / 2),
                             corner.y + rng.uniform(8, height / 2));
    cv::rectangle(image, corner, opposite, colour(1), cv::FILLED);
    cv::rectangle(ids, corner, opposite, id(1), cv::FILLED);
    const cv::Point centre(rng.uniform(width / 3, width), rng.uniform(height / 3, height));
    const cv::Size axes(rng.uniform(6, 16), rng.uniform(6, 16));
    cv::ellipse(image, centre, axes, 0, 0, 360, colour(2), cv::FILLED);
    cv::ellipse(ids, centre, axes, 0, 0, 360, id(2), cv::FILLED);
    const std::vector<cv::Point> triangle = {{rng.uniform(0, width), rng.uniform(0, height)},
                                             {rng.uniform(0, width), rng.uniform(0, height)},
                                             {rng.uniform(0, width), rng.uniform(0, height)}};
    cv::fillConvexPoly(image, triangle, colour(3));
    cv::fillConvexPoly(ids, triangle, id(3));
    const std::string stem = absl::StrCat("s", n);
    cv::imwrite((root / "images" / (stem + ".png")).string(), image);
    cv::Mat mask;
    ids.convertTo(mask, sixteen_bit ? CV_16U : CV_8U);
    cv::imwrite((root / "masks" / (stem + ".png")).string(), mask);
  }
  return root;
}

int64_t PixelsOffTheirClass(const uint8_t* image, const void* mask, int height, int width,
                            int id_bytes, int id_scale, int ignore_index, int64_t* judged) {
  const auto id_at = [&](int y, int x) -> int64_t {
    const size_t at = static_cast<size_t>(y) * width + x;
    switch (id_bytes) {
      case 1:
        return static_cast<const uint8_t*>(mask)[at];
      case 2:
        return static_cast<const uint16_t*>(mask)[at];
      default:
        return static_cast<const int32_t*>(mask)[at];
    }
  };
  int64_t off = 0;
  int64_t seen = 0;
  for (int y = 1; y + 1 < height; ++y) {
    for (int x = 1; x + 1 < width; ++x) {
      const int64_t id = id_at(y, x);
      bool uniform = true;
      for (int dy = -1; dy <= 1 && uniform; ++dy) {
        for (int dx = -1; dx <= 1 && uniform; ++dx) {
          uniform = id_at(y + dy, x + dx) == id;
        }
      }
      if (!uniform) {
        continue;
      }
      ++seen;
      const uint8_t* pixel = image + (static_cast<size_t>(y) * width + x) * 3;
      // The nearest of the four colours and black (what padding and
      // rotation corners leave): 0-3, or 4 for black.
      int nearest = 0;
      int64_t best = INT64_MAX;
      for (int candidate = 0; candidate < 5; ++candidate) {
        int64_t distance = 0;
        for (int c = 0; c < 3; ++c) {
          const int64_t difference = pixel[c] - (candidate < 4 ? kPaintedColours[candidate][c] : 0);
          distance += difference * difference;
        }
        if (distance < best) {
          best = distance;
          nearest = candidate;
        }
      }
      const int64_t expected = id == ignore_index ? 4 : id / id_scale;
      if (nearest != expected) {
        ++off;
      }
    }
  }
  if (judged != nullptr) {
    *judged = seen;
  }
  return off;
}

}  // namespace heterodl::testing
