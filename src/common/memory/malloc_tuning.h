// Allocator settings for processes that move batches.
//
// gRPC receives each batch into hundreds of fresh 64 KiB slices and frees
// them once the batch is decoded. With glibc's defaults the freed top of the
// heap is handed back to the kernel and faulted in again for the next batch:
// page faults were 15% of the loader's CPU at 4 GB/s (docs/benchmarks.md).
// Keeping freed memory costs nothing but resident memory the process had
// already used. The same goes for the data server's per-image buffers
// (decoder rows, resized images), which glibc would otherwise mmap afresh.
//
// Call once at the start of main() of heterodl's own executables; a library
// (the Python module) leaves its host process's allocator alone.
#ifndef HETERODL_SRC_COMMON_MEMORY_MALLOC_TUNING_H_
#define HETERODL_SRC_COMMON_MEMORY_MALLOC_TUNING_H_

namespace heterodl {

void KeepFreedHeapMemory();

}  // namespace heterodl

#endif  // HETERODL_SRC_COMMON_MEMORY_MALLOC_TUNING_H_
