// What this process has used, as the kernel counts it.
#ifndef HETERODL_SRC_COMMON_PROCESS_PROCESS_STATS_H_
#define HETERODL_SRC_COMMON_PROCESS_PROCESS_STATS_H_

#include <cstdint>

namespace heterodl {

// Peak resident set size of this process, from /proc/self/status (VmHWM);
// 0 where that cannot be read.
uint64_t PeakRssBytes();

// The memory this process may use: the machine's, or its cgroup's limit when
// that is lower (a container's; cgroup v2 or v1, as mounted).
uint64_t UsableMemoryBytes();

}  // namespace heterodl

#endif  // HETERODL_SRC_COMMON_PROCESS_PROCESS_STATS_H_
