// CudaHostAllocator: page-locked (CUDA pinned) host memory for a BufferPool,
// from the CUDA runtime loaded at run time, so that code using it links no
// CUDA and no LibTorch. The Python package uses it: one wheel serves machines
// with and without CUDA and any torch (docs/python.md, "Pinned memory").
//
//   ASSIGN_OR_RETURN(HostAllocator pinned, CudaHostAllocator(/*device=*/local_rank));
//   auto pool = BufferPool::Create(/*max_free=*/8, pinned);
//
// The runtime is the one already loaded into the process when there is one
// (torch's, or JAX's), so memory is pinned in the caller's CUDA context;
// otherwise the first libcudart the dynamic linker finds. Its library stays
// loaded for the life of the process.
#ifndef HETERODL_SRC_COMMON_MEMORY_CUDA_HOST_ALLOCATOR_H_
#define HETERODL_SRC_COMMON_MEMORY_CUDA_HOST_ALLOCATOR_H_

#include "absl/status/statusor.h"
#include "src/common/memory/buffer_pool.h"

namespace heterodl {

// An allocator of pinned host memory (cudaHostAlloc / cudaFreeHost), made
// under `device`'s context (the device the caller trains on: the allocating
// thread is switched to it first, so no other GPU gets a context) and
// portable to every context. FAILED_PRECONDITION, saying why, when no CUDA
// runtime can be loaded or it has no such device; the allocator's `allocate`
// returns nullptr when CUDA cannot pin more memory.
absl::StatusOr<HostAllocator> CudaHostAllocator(int device);

}  // namespace heterodl

#endif  // HETERODL_SRC_COMMON_MEMORY_CUDA_HOST_ALLOCATOR_H_
