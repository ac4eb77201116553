#include "src/data/sample_cache.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/status_testing.h"
#include "tests/testing/test_images.h"

namespace heterodl {
namespace {

TEST(SampleCacheTest, WhatIsPutIsGotBackAndKeptAcrossServers) {
  const std::filesystem::path dir = testing::MakeTempDir("sample-cache");
  {
    ASSERT_OK_AND_ASSIGN(auto cache, SampleCache::Open(dir.string(), 1 << 20, 0xfeed));
    EXPECT_FALSE(cache->Get("7").has_value());
    cache->Put("7", "seven's bytes");
    cache->Put("7.mask", "its mask");
    EXPECT_EQ(cache->Get("7"), "seven's bytes");
    EXPECT_EQ(cache->Get("7.mask"), "its mask");
    const SampleCache::Counts counts = cache->counts();
    EXPECT_EQ(counts.hits, 2);
    EXPECT_EQ(counts.misses, 1);
    EXPECT_EQ(counts.entries, 2);
  }
  // A temporary a dying server left is removed; the entries are kept.
  std::ofstream(dir / "heterodl-000000000000feed" / ".tmp-3") << "torn";
  ASSERT_OK_AND_ASSIGN(auto reopened, SampleCache::Open(dir.string(), 1 << 20, 0xfeed));
  EXPECT_EQ(reopened->Get("7"), "seven's bytes");
  EXPECT_FALSE(std::filesystem::exists(dir / "heterodl-000000000000feed" / ".tmp-3"));
  // Another dataset's samples are another folder's.
  ASSERT_OK_AND_ASSIGN(auto other, SampleCache::Open(dir.string(), 1 << 20, 0xbeef));
  EXPECT_FALSE(other->Get("7").has_value());
}

TEST(SampleCacheTest, TheLeastRecentlyUsedGoFirstWithinTheBound) {
  const std::filesystem::path dir = testing::MakeTempDir("sample-cache-bound");
  ASSERT_OK_AND_ASSIGN(auto cache, SampleCache::Open(dir.string(), 30, 1));
  cache->Put("a", std::string(10, 'a'));
  cache->Put("b", std::string(10, 'b'));
  cache->Put("c", std::string(10, 'c'));
  EXPECT_TRUE(cache->Get("a").has_value());  // "b" is now the oldest
  cache->Put("d", std::string(10, 'd'));
  EXPECT_FALSE(cache->Get("b").has_value());
  EXPECT_TRUE(cache->Get("a").has_value());
  EXPECT_TRUE(cache->Get("c").has_value());
  EXPECT_TRUE(cache->Get("d").has_value());
  cache->Put("huge", std::string(31, 'h'));  // larger than the whole cache
  EXPECT_FALSE(cache->Get("huge").has_value());
  const SampleCache::Counts counts = cache->counts();
  EXPECT_EQ(counts.evicted, 1);
  EXPECT_LE(counts.bytes, 30u);
  // A file removed behind the server's back is a miss, not an error.
  std::filesystem::remove(cache->folder() / "a");
  EXPECT_FALSE(cache->Get("a").has_value());
}

TEST(SampleCacheTest, AFolderThatCannotBeMadeIsAnError) {
  const std::filesystem::path dir = testing::MakeTempDir("sample-cache-file");
  std::ofstream(dir / "a-file") << "not a folder";
  const auto cache = SampleCache::Open((dir / "a-file").string(), 1 << 20, 1);
  EXPECT_TRUE(absl::IsUnavailable(cache.status())) << cache.status();
}

}  // namespace
}  // namespace heterodl
