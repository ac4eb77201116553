// SharedRegions: memory another process on this host can map, handed out as
// a BufferPool's allocator. A data server builds its batches in it, so that a
// loader on the same host reads the pixels where they were written instead
// of through a socket (src/wire/pixel_channel.h, "Same host").
//
//   std::shared_ptr<SharedRegions> regions = SharedRegions::Create();
//   auto pool = BufferPool::Create(/*max_free=*/8, regions->allocator());
//   ASSIGN_OR_RETURN(PooledBuffer buffer, pool->Get(bytes));
//   std::optional<SharedSpan> span = regions->Find(buffer.data(), buffer.size());
//   // send span->fd once (SCM_RIGHTS), then (span->region, span->offset)
//
// Each allocation is its own memfd, sealed against shrinking and growing, so
// a process that maps it can never fault on a page the file lost. Where
// memfds cannot be made (a sandbox's seccomp policy, a memory limit) the
// allocation comes from the heap instead, with a warning: Find() does not
// know it, and its pixels go through the socket.
#ifndef HETERODL_SRC_COMMON_MEMORY_SHARED_REGIONS_H_
#define HETERODL_SRC_COMMON_MEMORY_SHARED_REGIONS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "src/common/memory/buffer_pool.h"

namespace heterodl {

// Where a span of bytes lies in a region.
struct SharedSpan {
  uint64_t region = 0;  // never reused within one SharedRegions
  int fd = -1;          // the region's memfd, open while the region lives
  uint64_t region_bytes = 0;
  uint64_t offset = 0;  // of the span's first byte in the region
};

class SharedRegions : public std::enable_shared_from_this<SharedRegions> {
 public:
  // Called with a region's id once it is freed (outside any lock of this
  // class, on the thread that released the last buffer in it).
  using ReleaseListener = std::function<void(uint64_t region)>;

  static std::shared_ptr<SharedRegions> Create();
  ~SharedRegions();
  SharedRegions(const SharedRegions&) = delete;
  SharedRegions& operator=(const SharedRegions&) = delete;

  // Allocates regions (a memfd each, mapped read-write here). The allocator
  // keeps this object alive.
  HostAllocator allocator();

  // The region holding all of [data, data + size), if there is one. The
  // span's fd stays open as long as the memory at `data` is allocated.
  std::optional<SharedSpan> Find(const uint8_t* data, size_t size) const ABSL_LOCKS_EXCLUDED(mu_);

  // One listener at a time; an empty function removes it.
  void SetReleaseListener(ReleaseListener listener) ABSL_LOCKS_EXCLUDED(mu_);

  // Regions allocated and not yet freed.
  size_t live() const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether region `id` is still allocated.
  bool IsLive(uint64_t id) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  SharedRegions() = default;
  struct Region {
    uint64_t id = 0;
    int fd = -1;
    size_t bytes = 0;
  };
  void* Allocate(size_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  void Release(void* data) ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  std::map<uintptr_t, Region> regions_ ABSL_GUARDED_BY(mu_);  // by start address
  std::set<void*> heap_fallbacks_ ABSL_GUARDED_BY(mu_);
  bool warned_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  ReleaseListener on_release_ ABSL_GUARDED_BY(mu_);
};

// Maps a region another process sent (`fd`, which is closed either way)
// read-only, after checking that it is a sealed memfd of at least
// `min_bytes`: a peer cannot shrink it under the mapping. FAILED_PRECONDITION
// saying what is wrong otherwise.
struct MappedRegion {
  const uint8_t* data = nullptr;
  size_t bytes = 0;
};
absl::StatusOr<MappedRegion> MapSharedRegion(int fd, size_t min_bytes);
void UnmapSharedRegion(const MappedRegion& region);

}  // namespace heterodl

#endif  // HETERODL_SRC_COMMON_MEMORY_SHARED_REGIONS_H_
