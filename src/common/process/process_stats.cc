#include "src/common/process/process_stats.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace heterodl {

uint64_t PeakRssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipWhitespace());
      uint64_t kilobytes = 0;
      if (fields.size() >= 2 && absl::SimpleAtoi(fields[1], &kilobytes)) {
        return kilobytes * 1024;
      }
    }
  }
  return 0;
}

namespace {

// The number a cgroup memory file holds ("max" and unreadable: none).
uint64_t LimitIn(const std::string& path) {
  std::ifstream file(path);
  std::string text;
  uint64_t limit = 0;
  if (file >> text && absl::SimpleAtoi(text, &limit)) {
    return limit;
  }
  return UINT64_MAX;
}

// This process's cgroup v2 path ("0::/path" in /proc/self/cgroup).
std::string CgroupV2Path() {
  std::ifstream cgroups("/proc/self/cgroup");
  std::string line;
  while (std::getline(cgroups, line)) {
    if (line.rfind("0::", 0) == 0) {
      return line.substr(3);
    }
  }
  return "/";
}

}  // namespace

uint64_t UsableMemoryBytes() {
  const int64_t pages = sysconf(_SC_PHYS_PAGES);
  const int64_t page_size = sysconf(_SC_PAGESIZE);
  uint64_t usable = pages > 0 && page_size > 0
                        ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size)
                        : UINT64_MAX;
  for (const std::string& path :
       {"/sys/fs/cgroup" + CgroupV2Path() + "/memory.max", std::string("/sys/fs/cgroup/memory.max"),
        std::string("/sys/fs/cgroup/memory/memory.limit_in_bytes")}) {
    usable = std::min(usable, LimitIn(path));
  }
  return usable;
}

}  // namespace heterodl
