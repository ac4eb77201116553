#include "src/common/memory/shared_regions.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/common/log.h"

namespace heterodl {
namespace {

constexpr unsigned kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

}  // namespace

std::shared_ptr<SharedRegions> SharedRegions::Create() {
  return std::shared_ptr<SharedRegions>(new SharedRegions());
}

SharedRegions::~SharedRegions() {
  // Buffers hold the allocator, which holds this: none is left.
  absl::MutexLock lock(&mu_);
  for (void* heap : heap_fallbacks_) {
    std::free(heap);
  }
  for (const auto& [start, region] : regions_) {
    munmap(reinterpret_cast<void*>(start), region.bytes);  // NOLINT(performance-no-int-to-ptr)
    ::close(region.fd);
  }
}

HostAllocator SharedRegions::allocator() {
  std::shared_ptr<SharedRegions> self = shared_from_this();
  return {[self](size_t bytes) { return self->Allocate(bytes); },
          [self](void* data) { self->Release(data); }};
}

void* SharedRegions::Allocate(size_t bytes) {
  if (bytes == 0) {
    bytes = 1;
  }
  const int fd = memfd_create("heterodl-pixels", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  void* data = MAP_FAILED;
  if (fd >= 0 && ftruncate(fd, static_cast<off_t>(bytes)) == 0 &&
      fcntl(fd, F_ADD_SEALS, kSeals) == 0) {
    data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (data != MAP_FAILED) {
    absl::MutexLock lock(&mu_);
    regions_[reinterpret_cast<uintptr_t>(data)] = {next_id_++, fd, bytes};
    return data;
  }
  const int error = errno;
  if (fd >= 0) {
    ::close(fd);
  }
  // The batch still gets built; only its way to a same-host loader changes.
  void* heap = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  absl::MutexLock lock(&mu_);
  if (!warned_) {
    warned_ = true;
    LogWarning(
        "shared pixel memory: %d bytes: %s; batches go to same-host loaders through the "
        "socket instead",
        bytes, std::strerror(error));
  }
  if (heap != nullptr) {
    heap_fallbacks_.insert(heap);
  }
  return heap;
}

void SharedRegions::Release(void* data) {
  ReleaseListener listener;
  uint64_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    if (heap_fallbacks_.erase(data) > 0) {
      std::free(data);
      return;
    }
    auto it = regions_.find(reinterpret_cast<uintptr_t>(data));
    if (it == regions_.end()) {
      return;
    }
    munmap(data, it->second.bytes);
    ::close(it->second.fd);
    id = it->second.id;
    regions_.erase(it);
    listener = on_release_;
  }
  if (listener) {
    listener(id);
  }
}

std::optional<SharedSpan> SharedRegions::Find(const uint8_t* data, size_t size) const {
  const uintptr_t address = reinterpret_cast<uintptr_t>(data);
  absl::MutexLock lock(&mu_);
  auto it = regions_.upper_bound(address);
  if (it == regions_.begin()) {
    return std::nullopt;
  }
  --it;
  const uintptr_t start = it->first;
  const Region& region = it->second;
  if (address + size > start + region.bytes) {
    return std::nullopt;
  }
  return SharedSpan{region.id, region.fd, region.bytes, address - start};
}

void SharedRegions::SetReleaseListener(ReleaseListener listener) {
  absl::MutexLock lock(&mu_);
  on_release_ = std::move(listener);
}

size_t SharedRegions::live() const {
  absl::MutexLock lock(&mu_);
  return regions_.size();
}

bool SharedRegions::IsLive(uint64_t id) const {
  absl::MutexLock lock(&mu_);
  return std::any_of(regions_.begin(), regions_.end(),
                     [id](const auto& entry) { return entry.second.id == id; });
}

absl::StatusOr<MappedRegion> MapSharedRegion(int fd, size_t min_bytes) {
  struct stat info {};
  const int seals = fcntl(fd, F_GET_SEALS);
  std::string problem;
  if (fstat(fd, &info) != 0) {
    problem = absl::StrCat("fstat: ", std::strerror(errno));
  } else if (seals < 0 || (static_cast<unsigned>(seals) & F_SEAL_SHRINK) == 0) {
    problem = "it is not sealed against shrinking";
  } else if (info.st_size < 0 || static_cast<size_t>(info.st_size) < min_bytes) {
    problem =
        absl::StrCat("it holds ", info.st_size, " bytes, fewer than the ", min_bytes, " announced");
  }
  void* data = MAP_FAILED;
  if (problem.empty()) {
    data = mmap(nullptr, static_cast<size_t>(info.st_size), PROT_READ, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED) {
      problem = absl::StrCat("mmap: ", std::strerror(errno));
    }
  }
  ::close(fd);
  if (!problem.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("shared pixel memory: ", problem));
  }
  return MappedRegion{static_cast<const uint8_t*>(data), static_cast<size_t>(info.st_size)};
}

void UnmapSharedRegion(const MappedRegion& region) {
  if (region.data != nullptr) {
    munmap(const_cast<uint8_t*>(region.data), region.bytes);
  }
}

}  // namespace heterodl
