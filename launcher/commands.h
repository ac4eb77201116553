// The launcher's commands. Each reads the flags (launcher/flags.h) and the
// positional arguments left after them, runs, and returns the process exit
// code (docs/operations.md lists them). Long-running commands stop in order
// when `stop` triggers (SIGTERM, SIGINT).
#ifndef HETERODL_LAUNCHER_COMMANDS_H_
#define HETERODL_LAUNCHER_COMMANDS_H_

#include <string>
#include <vector>

#include "launcher/stop_signal.h"
#include "src/cluster/cluster_view.h"

namespace heterodl {

// Exit codes shared by all commands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

int RunServeCommand(StopSignal& stop);
int RunTrainCommand(StopSignal& stop);
int RunLocalCommand(StopSignal& stop);
int RunClusterCommand();
int RunDatasetCommand(const std::vector<std::string>& arguments);
int RunStatusCommand(const std::vector<std::string>& arguments);
int RunBenchCommand(const std::vector<std::string>& arguments);
int RunPlanCommand();
// `heterodl` alone or `heterodl launch [-- TRAIN_ARGS]`: resolves the cluster
// view and becomes serve, train or local.
int RunLaunchCommand(const std::vector<std::string>& arguments, StopSignal& stop);

// The cluster settings given by flags (empty where not given).
ClusterSettings ClusterSettingsFromFlags();

}  // namespace heterodl

#endif  // HETERODL_LAUNCHER_COMMANDS_H_
