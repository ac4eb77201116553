// Page-locked host memory for the loader's pixel buffers, from LibTorch's
// pinned allocator: a batch then reaches a CUDA device with one asynchronous
// copy. Used by the trainer and the Python module (its own small library so
// the module does not link the trainer).
#ifndef HETERODL_SRC_TRAIN_PINNED_MEMORY_H_
#define HETERODL_SRC_TRAIN_PINNED_MEMORY_H_

#include "src/common/memory/buffer_pool.h"

namespace heterodl {

// REQUIRES: CUDA is available (torch::cuda::is_available()).
HostAllocator PinnedHostAllocator();

}  // namespace heterodl

#endif  // HETERODL_SRC_TRAIN_PINNED_MEMORY_H_
