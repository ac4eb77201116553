// The launcher's flag values checked against what they mean, after parsing
// and before a command starts anything: a port outside [0, 65535], a negative
// or absurd thread count, a batch of 0, an unknown model or a malformed
// address is a usage error (exit code 2) naming the flag, not a failure
// after `local` has started servers and ranks.
#ifndef HETERODL_LAUNCHER_FLAG_CHECKS_H_
#define HETERODL_LAUNCHER_FLAG_CHECKS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace heterodl {

// INVALID_ARGUMENT naming the first flag (dashed) whose value is out of its
// range, with the range. Defaults always pass.
absl::Status CheckFlagValues();

// The Prometheus port `command` (serve, train) is asked for: --metrics-port,
// else $HETERODL_METRICS_PORT; -1 when neither asks for metrics, 0 for any
// free port. INVALID_ARGUMENT naming the source for anything else.
absl::StatusOr<int> MetricsPortFromFlags(const std::string& command);

// The most decode threads a server may start on a machine with `cores`
// cores: beyond it threads only thrash.
int MaxThreads(int cores);

}  // namespace heterodl

#endif  // HETERODL_LAUNCHER_FLAG_CHECKS_H_
