#include "src/train/pinned_memory.h"

#include <torch/torch.h>

#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace heterodl {
namespace {

// Pinned tensors by data pointer: the pool deals in raw pointers.
class PinnedBlocks {
 public:
  void* Allocate(size_t bytes) ABSL_LOCKS_EXCLUDED(mu_) {
    try {
      torch::Tensor block = torch::empty({static_cast<int64_t>(bytes)},
                                         torch::TensorOptions(torch::kUInt8).pinned_memory(true));
      void* data = block.data_ptr();
      absl::MutexLock lock(&mu_);
      blocks_.emplace(data, std::move(block));
      return data;
    } catch (const std::exception&) {
      return nullptr;  // the pool reports RESOURCE_EXHAUSTED
    }
  }
  void Release(void* data) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    blocks_.erase(data);
  }

 private:
  absl::Mutex mu_;
  std::map<void*, torch::Tensor> blocks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

HostAllocator PinnedHostAllocator() {
  auto blocks = std::make_shared<PinnedBlocks>();
  return {[blocks](size_t bytes) { return blocks->Allocate(bytes); },
          [blocks](void* data) { blocks->Release(data); }};
}

}  // namespace heterodl
