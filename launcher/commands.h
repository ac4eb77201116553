// The launcher's commands. Each reads the flags (launcher/flags.h) and the
// positional arguments left after them, runs, and returns the process exit
// code (docs/operations.md lists them). Long-running commands stop in order
// when `stop` triggers (SIGTERM, SIGINT).
#ifndef HETERODL_LAUNCHER_COMMANDS_H_
#define HETERODL_LAUNCHER_COMMANDS_H_

#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launcher/stop_signal.h"
#include "src/cluster/cluster_view.h"
#include "src/server/data_server.h"

namespace heterodl {

// Exit codes shared by all commands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// What a command runs with: the positional arguments left after the flags
// (the flags themselves are read through launcher/flags.h), and the signal
// that asks it to stop.
struct CommandContext {
  const std::vector<std::string>& arguments;
  StopSignal& stop;
};

// Each command's run function, as the command table (command_table.h) names
// it.
int RunServeCommand(const CommandContext& context);
int RunTrainCommand(const CommandContext& context);
int RunLocalCommand(const CommandContext& context);
int RunClusterCommand(const CommandContext& context);
int RunDatasetCommand(const CommandContext& context);
int RunStatusCommand(const CommandContext& context);
int RunBenchCommand(const CommandContext& context);
int RunPlanCommand(const CommandContext& context);
// `heterodl` alone or `heterodl launch [-- TRAIN_ARGS]`: resolves the cluster
// view and becomes serve, train or local.
int RunLaunchCommand(const CommandContext& context);

// The cluster settings given by flags (empty where not given).
ClusterSettings ClusterSettingsFromFlags();

// What `local` runs: its data servers and ranks, from the flags.
struct LocalRun {
  std::string self;  // this executable, started as each child (filled by the command)
  // What the servers serve: `serve` arguments, --dataset and --pipeline, or
  // --python-dataset and its settings.
  std::vector<std::string> data_arguments;
  int servers = 2;
  int ranks = 2;
  int threads = 1;  // per server
  std::filesystem::path run_dir;
};

// `local`'s run from its flags, a pure function of their values (and the
// cores): INVALID_ARGUMENT without one of --dataset and --python-dataset,
// with --data-servers (local starts its own), or with a trainer setting
// heterodl-trainer would refuse.
absl::StatusOr<LocalRun> LocalRunFromFlags();

// `serve`'s options from its flags: a pure function of the flags' values.
// INVALID_ARGUMENT names a missing or out-of-range flag (a usage error).
absl::StatusOr<DataServerOptions> ServeOptionsFromFlags();
// How the --s3-* flags (over the environment) say to read `dataset` when
// it, or --image-root, is in object storage; nullopt when neither is.
absl::StatusOr<std::optional<S3Options>> S3OptionsFromFlags(const std::string& dataset);
// The object-storage flags given here (--s3-*, --cache-*), as arguments
// for a `serve` this command starts.
std::vector<std::string> ObjectStorageServeArguments();
// How `dataset` is read, as serve's flags say (limits, object storage,
// TFRecord keys, the cache).
absl::StatusOr<DatasetLimits> DatasetLimitsFromFlags(const std::string& dataset);

}  // namespace heterodl

#endif  // HETERODL_LAUNCHER_COMMANDS_H_
