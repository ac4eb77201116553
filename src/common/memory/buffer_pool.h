// BufferPool: reusable byte buffers for batch pixels.
//
// A batch is tens of megabytes. glibc serves allocations that large with mmap
// and gives them back with munmap, so a fresh buffer per batch costs a page
// fault and a zeroed page per 4 KiB touched: at batch 256 (38.5 MB) that more
// than doubled the loader's CPU per GB received (docs/benchmarks.md). A pool
// keeps a few released buffers and hands them out again.
//
//   std::shared_ptr<BufferPool> pool = BufferPool::Create(/*max_free=*/8);
//   ASSIGN_OR_RETURN(PooledBuffer buffer, pool->Get(bytes));
//   Fill(buffer.data(), buffer.size());
//   // ~PooledBuffer returns the memory to the pool, which may outlive its
//   // creator: every buffer holds a reference to it.
#ifndef HETERODL_SRC_COMMON_MEMORY_BUFFER_POOL_H_
#define HETERODL_SRC_COMMON_MEMORY_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace heterodl {

// Where a pool's memory comes from. The default is 64-byte aligned heap
// memory; the trainer passes page-locked (CUDA pinned) memory so that the
// host-to-device copy of a batch needs no staging copy.
struct HostAllocator {
  // Returns nullptr when out of memory.
  std::function<void*(size_t bytes)> allocate;
  std::function<void(void* data)> release;
};

class BufferPool;

// A buffer of size() bytes taken from a BufferPool (contents unspecified).
// Move-only; destroying it returns the memory to its pool.
class PooledBuffer {
 public:
  PooledBuffer() = default;
  PooledBuffer(PooledBuffer&& other) noexcept { *this = std::move(other); }
  PooledBuffer& operator=(PooledBuffer&& other) noexcept;
  PooledBuffer(const PooledBuffer&) = delete;
  PooledBuffer& operator=(const PooledBuffer&) = delete;
  ~PooledBuffer() { Reset(); }

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::string_view view() const {
    return std::string_view(reinterpret_cast<const char*>(data_), size_);
  }
  // Returns the memory to the pool now; the buffer becomes empty.
  void Reset();

 private:
  friend class BufferPool;
  PooledBuffer(std::shared_ptr<BufferPool> pool, uint8_t* data, size_t size, size_t capacity)
      : pool_(std::move(pool)), data_(data), size_(size), capacity_(capacity) {}

  std::shared_ptr<BufferPool> pool_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  // Keeps at most `max_free` released buffers; more are freed at once.
  static std::shared_ptr<BufferPool> Create(size_t max_free, HostAllocator allocator = {});
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of `bytes` bytes: the smallest free one that is large enough
  // (and not more than twice as large), else a new one. RESOURCE_EXHAUSTED
  // when the allocator fails.
  absl::StatusOr<PooledBuffer> Get(size_t bytes) ABSL_LOCKS_EXCLUDED(mu_);

  // Buffers allocated from the allocator so far (a reused one is not counted
  // again): how tests see that the pool reuses memory.
  int64_t allocations() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  BufferPool(size_t max_free, HostAllocator allocator);
  friend class PooledBuffer;
  void Release(uint8_t* data, size_t capacity) ABSL_LOCKS_EXCLUDED(mu_);

  const size_t max_free_;
  const HostAllocator allocator_;
  mutable absl::Mutex mu_;
  // (data, capacity) of released buffers.
  std::vector<std::pair<uint8_t*, size_t>> free_ ABSL_GUARDED_BY(mu_);
  int64_t allocations_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_COMMON_MEMORY_BUFFER_POOL_H_
