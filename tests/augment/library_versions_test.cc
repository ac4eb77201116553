#include "augment/library_versions.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heterodl {
namespace {

using ::testing::MatchesRegex;

TEST(LibraryVersionsTest, NamesEachDecodingLibraryWithItsVersion) {
  EXPECT_THAT(
      DecoderLibraryVersions(),
      MatchesRegex("OpenCV [0-9]+\\.[0-9]+\\.[0-9]+, libjpeg-turbo [0-9]+\\.[0-9]+\\.[0-9]+, "
                   "libpng [0-9]+\\.[0-9]+\\.[0-9]+, libdeflate [0-9]+\\.[0-9]+, "
                   "libwebp [0-9]+\\.[0-9]+\\.[0-9]+"));
}

}  // namespace
}  // namespace heterodl
