#include "src/common/memory/buffer_pool.h"

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace heterodl {
namespace {

constexpr size_t kAlignment = 64;

HostAllocator HeapAllocator() {
  return {[](size_t bytes) -> void* {
            // aligned_alloc wants a size that is a multiple of the alignment.
            return std::aligned_alloc(kAlignment,
                                      (bytes + kAlignment - 1) / kAlignment * kAlignment);
          },
          [](void* data) { std::free(data); }};
}

}  // namespace

PooledBuffer& PooledBuffer::operator=(PooledBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    pool_ = std::move(other.pool_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

void PooledBuffer::Reset() {
  if (pool_ != nullptr) {
    pool_->Release(data_, capacity_);
  }
  pool_.reset();
  data_ = nullptr;
  size_ = 0;
  capacity_ = 0;
}

std::shared_ptr<BufferPool> BufferPool::Create(size_t max_free, HostAllocator allocator) {
  if (!allocator.allocate || !allocator.release) {
    allocator = HeapAllocator();
  }
  return std::shared_ptr<BufferPool>(new BufferPool(max_free, std::move(allocator)));
}

BufferPool::BufferPool(size_t max_free, HostAllocator allocator)
    : max_free_(max_free), allocator_(std::move(allocator)) {}

BufferPool::~BufferPool() {
  // Every PooledBuffer holds a reference, so only free buffers remain.
  for (const auto& [data, capacity] : free_) {
    allocator_.release(data);
  }
}

absl::StatusOr<PooledBuffer> BufferPool::Get(size_t bytes) {
  if (bytes == 0) {
    return PooledBuffer();
  }
  {
    absl::MutexLock lock(&mu_);
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second >= bytes && it->second / 2 <= bytes &&
          (best == free_.end() || it->second < best->second)) {
        best = it;
      }
    }
    if (best != free_.end()) {
      const auto [data, capacity] = *best;
      free_.erase(best);
      return PooledBuffer(shared_from_this(), data, bytes, capacity);
    }
    ++allocations_;
  }
  void* data = allocator_.allocate(bytes);
  if (data == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate a ", bytes, "-byte buffer"));
  }
  return PooledBuffer(shared_from_this(), static_cast<uint8_t*>(data), bytes, bytes);
}

int64_t BufferPool::allocations() const {
  absl::MutexLock lock(&mu_);
  return allocations_;
}

void BufferPool::Release(uint8_t* data, size_t capacity) {
  {
    absl::MutexLock lock(&mu_);
    if (free_.size() < max_free_) {
      free_.emplace_back(data, capacity);
      return;
    }
  }
  allocator_.release(data);
}

}  // namespace heterodl
