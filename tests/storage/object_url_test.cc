#include "src/storage/object_url.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/storage/http_client.h"
#include "tests/testing/status_testing.h"

namespace heterodl {
namespace {

using ::testing::HasSubstr;

TEST(ObjectUrlTest, BucketAndKey) {
  ASSERT_OK_AND_ASSIGN(const ObjectUrl url, ParseObjectUrl("s3://my-data/imagenet/train/"));
  EXPECT_EQ(url.bucket, "my-data");
  EXPECT_EQ(url.key, "imagenet/train/");
  EXPECT_EQ(url.ToString(), "s3://my-data/imagenet/train/");
  ASSERT_OK_AND_ASSIGN(const ObjectUrl bucket, ParseObjectUrl("s3://my.data"));
  EXPECT_EQ(bucket.key, "");
  EXPECT_EQ(bucket.ToString(), "s3://my.data/");
  EXPECT_TRUE(IsObjectUrl("s3://b/k"));
  EXPECT_FALSE(IsObjectUrl("/data/s3://b"));
  EXPECT_FALSE(IsObjectUrl("relative/dir"));
}

TEST(ObjectUrlTest, ChildrenAndFolders) {
  const ObjectUrl prefix{"b", "p"};
  EXPECT_EQ(prefix.Child("x/y.jpg"), (ObjectUrl{"b", "p/x/y.jpg"}));
  EXPECT_EQ((ObjectUrl{"b", "p/"}).Child("y.jpg"), (ObjectUrl{"b", "p/y.jpg"}));
  EXPECT_EQ((ObjectUrl{"b", ""}).Child("y.jpg"), (ObjectUrl{"b", "y.jpg"}));
  EXPECT_EQ((ObjectUrl{"b", "p/list.txt"}).Folder(), (ObjectUrl{"b", "p/"}));
  EXPECT_EQ((ObjectUrl{"b", "list.txt"}).Folder(), (ObjectUrl{"b", ""}));
}

TEST(ObjectUrlTest, WhatIsNoBucketIsRefusedNamingIt) {
  for (const char* bad : {"s3://", "s3:///key", "s3://Upper/k", "s3://ab/k", "s3://-dash/k",
                          "s3://under_score/k", "gs://b/k"}) {
    const absl::StatusOr<ObjectUrl> url = ParseObjectUrl(bad);
    ASSERT_TRUE(absl::IsInvalidArgument(url.status())) << bad;
    EXPECT_THAT(url.status().message(), HasSubstr(bad));
  }
}

TEST(UriEscapeTest, OnlyUnreservedCharactersStay) {
  EXPECT_EQ(UriEscape("a b/c~d-e_f.g+h", true), "a%20b/c~d-e_f.g%2Bh");
  EXPECT_EQ(UriEscape("a/b=c&d", false), "a%2Fb%3Dc%26d");
  EXPECT_EQ(UriEscape("\xc3\xa9t\xc3\xa9", false), "%C3%A9t%C3%A9");
}

}  // namespace
}  // namespace heterodl
