// Page-locked host memory for the loader's pixel buffers, from LibTorch's
// pinned allocator: a batch then reaches a CUDA device with one asynchronous
// copy. The trainer's: it has LibTorch, whose caching pinned allocator this
// borrows. The Python package, which links no LibTorch, pins through the CUDA
// runtime it loads itself (src/common/memory/cuda_host_allocator.h).
#ifndef HETERODL_SRC_TRAIN_PINNED_MEMORY_H_
#define HETERODL_SRC_TRAIN_PINNED_MEMORY_H_

#include "src/common/memory/buffer_pool.h"

namespace heterodl {

// REQUIRES: CUDA is available (torch::cuda::is_available()).
HostAllocator PinnedHostAllocator();

}  // namespace heterodl

#endif  // HETERODL_SRC_TRAIN_PINNED_MEMORY_H_
