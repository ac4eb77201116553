#include "src/common/process/process_stats.h"

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

}  // namespace heterodl
