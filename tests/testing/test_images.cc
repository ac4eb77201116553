#include "tests/testing/test_images.h"

#include <unistd.h>

#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"

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

}  // namespace heterodl::testing
