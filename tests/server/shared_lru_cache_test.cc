#include "src/server/shared_lru_cache.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace heterodl {
namespace {

std::shared_ptr<const int> Value(int value) { return std::make_shared<const int>(value); }

TEST(SharedLruCacheTest, TheLeastRecentlyUsedMakeRoom) {
  SharedLruCache<int> cache(/*max_entries=*/2, /*max_bytes=*/1000);
  cache.Put("a", Value(1), 10);
  cache.Put("b", Value(2), 10);
  ASSERT_NE(cache.Get("a"), nullptr);  // "b" is now the least recently used
  cache.Put("c", Value(3), 10);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_NE(cache.Get("a"), nullptr);
  EXPECT_EQ(cache.Get("b"), nullptr);
  EXPECT_EQ(*cache.Get("c"), 3);
}

TEST(SharedLruCacheTest, BytesBoundItTooAndTheFirstValueOfAKeyStays) {
  SharedLruCache<int> cache(/*max_entries=*/100, /*max_bytes=*/100);
  cache.Put("a", Value(1), 60);
  cache.Put("b", Value(2), 60);  // "a" goes
  EXPECT_EQ(cache.Get("a"), nullptr);
  EXPECT_EQ(cache.bytes(), 60u);
  EXPECT_EQ(*cache.Put("b", Value(20), 60), 2);  // cached meanwhile: the first wins
}

TEST(SharedLruCacheTest, ValuesInUseStayAndOverflowIsReturnedUncached) {
  SharedLruCache<int> cache(/*max_entries=*/2, /*max_bytes=*/1000);
  std::shared_ptr<const int> a = cache.Put("a", Value(1), 10);
  std::shared_ptr<const int> b = cache.Put("b", Value(2), 10);
  // Both in use: a third is served but not kept.
  std::shared_ptr<const int> c = cache.Put("c", Value(3), 10);
  EXPECT_EQ(*c, 3);
  EXPECT_EQ(cache.Get("c"), nullptr);
  EXPECT_EQ(cache.size(), 2u);
  // Once one is let go, it makes room.
  b.reset();
  cache.Put("d", Value(4), 10);
  EXPECT_EQ(cache.Get("b"), nullptr);
  EXPECT_EQ(*cache.Get("a"), 1);
  EXPECT_EQ(*cache.Get("d"), 4);
}

}  // namespace
}  // namespace heterodl
