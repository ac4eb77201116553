#include "src/common/log.h"

#include <unistd.h>

#include <cstdio>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace heterodl {
namespace {

// The tag is process-wide by nature (it names the process), set once in main.
struct LogState {
  absl::Mutex mu;
  std::string tag ABSL_GUARDED_BY(mu) = "heterodl";
};

LogState& State() {
  static LogState* state = new LogState();
  return *state;
}

char LevelLetter(LogLevel level) {
  switch (level) {
    case LogLevel::kInfo:
      return 'I';
    case LogLevel::kWarning:
      return 'W';
    case LogLevel::kError:
      return 'E';
  }
  return '?';
}

}  // namespace

void SetLogTag(absl::string_view tag) {
  absl::MutexLock lock(&State().mu);
  State().tag = std::string(tag);
}

void LogLine(LogLevel level, absl::string_view message) {
  std::string tag;
  {
    absl::MutexLock lock(&State().mu);
    tag = State().tag;
  }
  std::string line = absl::StrFormat(
      "%c %s %s[%d] %s\n", LevelLetter(level),
      absl::FormatTime("%H:%M:%E3S", absl::Now(), absl::LocalTimeZone()), tag, getpid(), message);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace heterodl
