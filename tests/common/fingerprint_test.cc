#include "src/common/fingerprint.h"

#include "gtest/gtest.h"

namespace heterodl {
namespace {

TEST(FingerprintTest, StableAcrossRuns) {
  // A fixed value: client and server of different builds must agree.
  EXPECT_EQ(Fingerprint().Add("abc").Add(uint64_t{7}).value(),
            Fingerprint().Add("abc").Add(uint64_t{7}).value());
  EXPECT_EQ(FingerprintToHex(Fingerprint().value()), "cbf29ce484222325");
}

TEST(FingerprintTest, FieldsAreDelimited) {
  EXPECT_NE(Fingerprint().Add("ab").Add("c").value(), Fingerprint().Add("a").Add("bc").value());
}

}  // namespace
}  // namespace heterodl
