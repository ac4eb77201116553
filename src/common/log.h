// Minimal leveled logging to stderr. Abseil 20220623 has no absl/log; this is
// a thin formatter over absl::FPrintF so every process logs in one format:
//
//   I 07:58:01.123 serve[1234] listening on 127.0.0.1:50051
//
// Each line is written with one fwrite, so lines of concurrent threads and of
// child processes sharing stderr do not interleave.
#ifndef HETERODL_SRC_COMMON_LOG_H_
#define HETERODL_SRC_COMMON_LOG_H_

#include <optional>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace heterodl {

enum class LogLevel { kDebug, kInfo, kWarning, kError };

// Sets the tag printed on every line of this process (e.g. "serve",
// "train/1"). Call once from main() before starting threads.
void SetLogTag(absl::string_view tag);

// Lines less severe than `level` are dropped (default kInfo). Call from
// main() with the --log-level flag.
void SetMinLogLevel(LogLevel level);
// "debug", "info", "warning" or "error"; nullopt for anything else.
std::optional<LogLevel> ParseLogLevel(absl::string_view name);
// Whether a line of `level` would be printed.
bool LogEnabled(LogLevel level);

void LogLine(LogLevel level, absl::string_view message);
// The same line stamped with `when` instead of now: for a line about an event
// that happened earlier than it could be written (a training step whose loss
// is read back a few steps later).
void LogLineAt(LogLevel level, absl::Time when, absl::string_view message);

template <typename... Args>
void LogDebug(const absl::FormatSpec<Args...>& format, const Args&... args) {
  if (LogEnabled(LogLevel::kDebug)) {
    LogLine(LogLevel::kDebug, absl::StrFormat(format, args...));
  }
}

template <typename... Args>
void LogInfo(const absl::FormatSpec<Args...>& format, const Args&... args) {
  LogLine(LogLevel::kInfo, absl::StrFormat(format, args...));
}
template <typename... Args>
void LogWarning(const absl::FormatSpec<Args...>& format, const Args&... args) {
  LogLine(LogLevel::kWarning, absl::StrFormat(format, args...));
}
template <typename... Args>
void LogError(const absl::FormatSpec<Args...>& format, const Args&... args) {
  LogLine(LogLevel::kError, absl::StrFormat(format, args...));
}

}  // namespace heterodl

#endif  // HETERODL_SRC_COMMON_LOG_H_
