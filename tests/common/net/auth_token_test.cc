#include "src/common/net/auth_token.h"

#include "gtest/gtest.h"
#include "tests/testing/test_images.h"

namespace heterodl {
namespace {

TEST(AuthTokenTest, ComparesExactly) {
  EXPECT_TRUE(TokensEqual("s3cret", "s3cret"));
  EXPECT_FALSE(TokensEqual("s3cret", "s3creT"));
  EXPECT_FALSE(TokensEqual("s3cret", "s3cre"));
  EXPECT_FALSE(TokensEqual("s3cret", ""));
}

TEST(AuthTokenTest, ReadsATrimmedTokenAndRefusesBadFiles) {
  const std::filesystem::path dir = testing::MakeTempDir("tokens");
  testing::WriteFile(dir / "good", "  abc-123_XYZ\n");
  EXPECT_EQ(*ReadAuthTokenFile((dir / "good").string()), "abc-123_XYZ");
  testing::WriteFile(dir / "empty", " \n");
  testing::WriteFile(dir / "spaced", "two words\n");
  for (const char* name : {"empty", "spaced", "missing"}) {
    absl::StatusOr<std::string> token = ReadAuthTokenFile((dir / name).string());
    ASSERT_FALSE(token.ok()) << name;
    EXPECT_NE(token.status().message().find(name), std::string::npos) << token.status();
  }
}

}  // namespace
}  // namespace heterodl
