#include "src/common/memory/buffer_pool.h"

#include <cstdlib>
#include <cstring>

#include "gtest/gtest.h"

namespace heterodl {
namespace {

TEST(BufferPoolTest, ReleasedBuffersAreHandedOutAgain) {
  std::shared_ptr<BufferPool> pool = BufferPool::Create(2);
  const uint8_t* first;
  {
    absl::StatusOr<PooledBuffer> buffer = pool->Get(1000);
    ASSERT_TRUE(buffer.ok());
    EXPECT_EQ(buffer->size(), 1000u);
    first = buffer->data();
    std::memset(buffer->data(), 1, buffer->size());
  }
  absl::StatusOr<PooledBuffer> again = pool->Get(900);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data(), first);
  EXPECT_EQ(again->size(), 900u);
  EXPECT_EQ(pool->allocations(), 1);
}

TEST(BufferPoolTest, AFreeBufferMoreThanTwiceTooLargeIsNotUsed) {
  std::shared_ptr<BufferPool> pool = BufferPool::Create(2);
  pool->Get(10000).value().Reset();
  absl::StatusOr<PooledBuffer> small = pool->Get(100);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(pool->allocations(), 2);
  // Nor one that is too small.
  small->Reset();
  ASSERT_TRUE(pool->Get(20000).ok());
  EXPECT_EQ(pool->allocations(), 3);
}

TEST(BufferPoolTest, KeepsAtMostMaxFreeBuffers) {
  int live = 0;
  HostAllocator counting{[&live](size_t bytes) {
                           ++live;
                           return std::malloc(bytes);
                         },
                         [&live](void* data) {
                           --live;
                           std::free(data);
                         }};
  std::shared_ptr<BufferPool> pool = BufferPool::Create(1, counting);
  {
    PooledBuffer a = *pool->Get(64);
    PooledBuffer b = *pool->Get(64);
    PooledBuffer c = *pool->Get(64);
    EXPECT_EQ(live, 3);
  }
  EXPECT_EQ(live, 1);
  pool.reset();
  EXPECT_EQ(live, 0);
}

TEST(BufferPoolTest, BuffersOutliveTheirCreatorsReference) {
  std::shared_ptr<BufferPool> pool = BufferPool::Create(4);
  PooledBuffer buffer = *pool->Get(4096);
  pool.reset();
  std::memset(buffer.data(), 7, buffer.size());  // still valid (ASan would tell)
  PooledBuffer moved = std::move(buffer);
  EXPECT_TRUE(buffer.empty());  // NOLINT(bugprone-use-after-move): the moved-from state
  EXPECT_EQ(moved.view()[4095], 7);
}

TEST(BufferPoolTest, AllocatorFailureIsResourceExhausted) {
  HostAllocator failing{[](size_t) -> void* { return nullptr; }, [](void*) {}};
  std::shared_ptr<BufferPool> pool = BufferPool::Create(4, failing);
  absl::StatusOr<PooledBuffer> buffer = pool->Get(1 << 20);
  EXPECT_EQ(buffer.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(pool->Get(0).ok());  // nothing to allocate
}

}  // namespace
}  // namespace heterodl
