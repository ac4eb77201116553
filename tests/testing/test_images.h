// Helpers that write small real images for tests.
#ifndef HETERODL_TESTS_TESTING_TEST_IMAGES_H_
#define HETERODL_TESTS_TESTING_TEST_IMAGES_H_

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

}  // namespace heterodl::testing

#endif  // HETERODL_TESTS_TESTING_TEST_IMAGES_H_
