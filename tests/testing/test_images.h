// Helpers that write small real images for tests.
#ifndef HETERODL_TESTS_TESTING_TEST_IMAGES_H_
#define HETERODL_TESTS_TESTING_TEST_IMAGES_H_

#include <cstdint>
#include <filesystem>
#include <string>

namespace heterodl::testing {

// A JPEG of `width` x `height` with a smooth colour pattern seeded by `seed`.
std::string MakeJpeg(int width, int height, int seed);

// `jpeg` with an APP1 "Exif" segment whose IFD0 holds Orientation =
// `orientation` (1-8) inserted after its SOI marker.
std::string WithExifOrientation(const std::string& jpeg, int orientation);

// A fresh empty directory under the test's temporary directory.
std::filesystem::path MakeTempDir(const std::string& name);

// Writes an image folder: `classes` folders with `per_class` JPEGs each.
std::filesystem::path MakeImageFolder(const std::string& name, int classes, int per_class);

void WriteFile(const std::filesystem::path& path, const std::string& contents);

// Writes a segmentation folder of `count` pairs ROOT/images/sN.png (RGB, of
// sizes between 56x40 and 88x72) and ROOT/masks/sN.png: a gray background
// (class 0) with a rectangle (class 1) painted kPaintedColours[1], an
// ellipse (2) and a triangle (3), placed at random by `seed`. The mask holds
// the ids, 8-bit, or with `sixteen_bit` 16-bit ids times kSixteenBitIdScale.
std::filesystem::path MakePaintedSegmentationFolder(const std::string& name, int count,
                                                    uint64_t seed, bool sixteen_bit = false);
inline constexpr int kSixteenBitIdScale = 1000;
// RGB of class 0 to 3.
inline constexpr unsigned char kPaintedColours[4][3] = {
    {128, 128, 128}, {230, 20, 20}, {20, 230, 20}, {20, 20, 230}};

// How many pixels of an RGB image (`height` x `width` x 3) disagree with
// their class in `mask` (ids of `id_bytes` 1, 2 or 4, divided by `id_scale`):
// pixels whose 3x3 neighbourhood holds one class whose colour (or the
// ignore index's, black) is not the pixel's nearest of kPaintedColours
// and black. Edge pixels, which interpolation blends, are not judged.
// `judged` (optional) counts the pixels judged.
int64_t PixelsOffTheirClass(const uint8_t* image, const void* mask, int height, int width,
                            int id_bytes, int id_scale, int ignore_index,
                            int64_t* judged = nullptr);

}  // namespace heterodl::testing

#endif  // HETERODL_TESTS_TESTING_TEST_IMAGES_H_
