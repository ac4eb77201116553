#include "src/common/memory/malloc_tuning.h"

#include <malloc.h>

namespace heterodl {

void KeepFreedHeapMemory() {
  // Return freed memory to the kernel only beyond 256 MiB of free heap.
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  // Setting the trim threshold freezes glibc's mmap threshold at 128 KiB, so
  // every decode's row buffers and every 224 x 224 x 3 image were mmapped
  // and faulted in afresh (page faults: ~4% of a data server's CPU, perf).
  // Up to 32 MiB (glibc's maximum) they now come from the heap and are
  // reused; batch buffers are pooled (src/common/memory/buffer_pool.h).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
}

}  // namespace heterodl
