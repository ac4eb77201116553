// `heterodl bench augment ...`: benchmarks (bench/).
#include <cstdio>

#include "absl/flags/flag.h"
#include "bench/augment_bench.h"
#include "launcher/commands.h"
#include "launcher/flags.h"
#include "src/common/log.h"

ABSL_FLAG(bool, no_peer, false, "bench: skip the peer (torchvision) measurement");
ABSL_FLAG(double, seconds, 3.0, "bench: seconds per measurement");
ABSL_FLAG(int32_t, rounds, 3, "bench: rounds of alternated measurements");
ABSL_FLAG(std::string, python, HETERODL_DEFAULT_PYTHON,
          "bench: Python with torchvision, for the peer");

namespace heterodl {

int RunBenchCommand(const std::vector<std::string>& arguments) {
  if (arguments.size() != 1 || arguments[0] != "augment") {
    LogError(
        "usage: heterodl bench augment --dataset DIR [--pipeline SPEC] [--threads N] "
        "[--json] [--no-peer]");
    return kExitUsage;
  }
  AugmentBenchOptions options;
  options.dataset = absl::GetFlag(FLAGS_dataset);
  if (options.dataset.empty()) {
    LogError("bench augment needs --dataset DIR");
    return kExitUsage;
  }
  options.pipeline = absl::GetFlag(FLAGS_pipeline);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.seconds = absl::GetFlag(FLAGS_seconds);
  options.rounds = absl::GetFlag(FLAGS_rounds);
  options.peer = !absl::GetFlag(FLAGS_no_peer);
  options.python = absl::GetFlag(FLAGS_python);
  options.peer_script = HETERODL_PEER_AUGMENT_SCRIPT;
  options.json = absl::GetFlag(FLAGS_json);
  absl::StatusOr<std::string> report = RunAugmentBench(options);
  if (!report.ok()) {
    LogError("%s", report.status().ToString());
    return kExitFailure;
  }
  std::printf("%s\n", report->c_str());
  return kExitOk;
}

}  // namespace heterodl
