#include "src/common/log.h"

#include <unistd.h>

#include <atomic>
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
  std::atomic<int> min_level{static_cast<int>(LogLevel::kInfo)};
};

LogState& State() {
  static LogState* state = new LogState();
  return *state;
}

char LevelLetter(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return 'D';
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

void SetMinLogLevel(LogLevel level) { State().min_level.store(static_cast<int>(level)); }

std::optional<LogLevel> ParseLogLevel(absl::string_view name) {
  if (name == "debug") {
    return LogLevel::kDebug;
  }
  if (name == "info") {
    return LogLevel::kInfo;
  }
  if (name == "warning") {
    return LogLevel::kWarning;
  }
  if (name == "error") {
    return LogLevel::kError;
  }
  return std::nullopt;
}

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) >= State().min_level.load(std::memory_order_relaxed);
}

void LogLine(LogLevel level, absl::string_view message) { LogLineAt(level, absl::Now(), message); }

void LogLineAt(LogLevel level, absl::Time when, absl::string_view message) {
  if (!LogEnabled(level)) {
    return;
  }
  std::string tag;
  {
    absl::MutexLock lock(&State().mu);
    tag = State().tag;
  }
  std::string line = absl::StrFormat("%c %s %s[%d] %s\n", LevelLetter(level),
                                     absl::FormatTime("%H:%M:%E3S", when, absl::LocalTimeZone()),
                                     tag, getpid(), message);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace heterodl
