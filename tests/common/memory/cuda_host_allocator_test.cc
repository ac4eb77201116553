#include "src/common/memory/cuda_host_allocator.h"

#include <gtest/gtest.h>

#include <cstring>

#include "src/common/memory/buffer_pool.h"

namespace heterodl {
namespace {

// Runs on machines with and without a GPU: with one, pinned buffers serve a
// pool; without, the allocator is refused with a status that says why, and
// nothing crashes (no runtime, a runtime without a driver, or no device).
TEST(CudaHostAllocatorTest, PinsMemoryOrSaysWhyNot) {
  absl::StatusOr<HostAllocator> pinned = CudaHostAllocator(/*device=*/0);
  if (!pinned.ok()) {
    EXPECT_EQ(pinned.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(pinned.status().message().find("CUDA"), absl::string_view::npos) << pinned.status();
    GTEST_SKIP() << "no CUDA device here: " << pinned.status();
  }
  std::shared_ptr<BufferPool> pool = BufferPool::Create(/*max_free=*/2, *pinned);
  absl::StatusOr<PooledBuffer> buffer = pool->Get(1 << 20);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  std::memset(buffer->data(), 7, buffer->size());
  EXPECT_EQ(buffer->data()[buffer->size() - 1], 7);
}

TEST(CudaHostAllocatorTest, ADeviceThatIsNotThereIsRefused) {
  absl::StatusOr<HostAllocator> pinned = CudaHostAllocator(/*device=*/-1);
  ASSERT_FALSE(pinned.ok());
  EXPECT_EQ(pinned.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace heterodl
