#include "src/common/malloc_tuning.h"

#include <malloc.h>

namespace heterodl {

void KeepFreedHeapMemory() {
  // Return freed memory to the kernel only beyond 256 MiB of free heap.
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

}  // namespace heterodl
