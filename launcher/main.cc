// heterodl: one binary, every role. See docs/architecture.md.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/internal/program_name.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "launcher/commands.h"
#include "launcher/flag_names.h"
#include "launcher/stop_signal.h"
#include "src/common/log.h"
#include "src/common/memory/malloc_tuning.h"
#include "src/common/process/signal_watcher.h"
#include "src/wire/grpc_lifetime.h"

namespace {

constexpr char kUsage[] = R"(heterogeneous data-parallel training

usage: heterodl [COMMAND] [FLAGS] [ARGS]

commands:
  launch [-- ARGS]     (default) read the cluster environment, become serve or train
  serve                data-group server: decode, augment, stream batches over gRPC
  train                dnn-group trainer: N ranks fed by the remote loader
  local                a whole heterogeneous job on this machine (servers + ranks)
  cluster [--json]     print the resolved cluster view
  dataset sample DIR   write the built-in sample dataset (--images N --seed S)
  status HOST:PORT...  live statistics of data servers
  bench augment        decode + augment images/s per core vs torchvision and OpenCV
  bench transport      data service GB/s on loopback vs a raw TCP pump
  bench step           homogeneous vs heterogeneous step time and cost, here
  bench feed           delivered images/s as a trainer sees them vs the decode engine
  plan                 which data instances to add to a GPU instance, and why

Run 'heterodl --helpfull' for every flag.)";

// What --version prints: the project's version and how it was built.
std::string VersionText() {
#ifdef NDEBUG
  constexpr const char* kBuild = "optimized";
#else
  constexpr const char* kBuild = "debug";
#endif
  return absl::StrCat("heterodl ", HETERODL_VERSION, " (", kBuild, " build)\n");
}

// --help, --helpfull and --version end here with exit code 0; Abseil's own
// handling would exit 1 for help and print no version of ours.
std::optional<int> HandleHelpAndVersion(const std::vector<std::string>& arguments) {
  for (size_t i = 1; i < arguments.size(); ++i) {
    const std::string& argument = arguments[i];
    if (argument == "--") break;
    if (argument == "--version") {
      std::fputs(VersionText().c_str(), stdout);
      return heterodl::kExitOk;
    }
    if (argument == "--help" || argument == "-help" || argument == "-h" ||
        argument == "--helpshort") {
      std::printf("%s\n", kUsage);
      return heterodl::kExitOk;
    }
    if (argument == "--helpfull") {
      // Every flag with its default and help (Abseil's formatter; the public
      // API only reaches it through ParseCommandLine's exit).
      absl::flags_internal::FlagsHelp(std::cout, "", absl::flags_internal::HelpFormat::kHumanReadable,
                                      kUsage);
      return heterodl::kExitOk;
    }
  }
  return std::nullopt;
}

bool IsCommand(const char* word) {
  static constexpr const char* kCommands[] = {"launch",  "serve",  "train", "local", "cluster",
                                              "dataset", "status", "bench", "plan"};
  for (const char* command : kCommands) {
    if (std::strcmp(word, command) == 0) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  heterodl::KeepFreedHeapMemory();
  // Before any thread starts: the watcher blocks SIGTERM/SIGINT for every
  // thread created after it, so only it receives them.
  heterodl::StopSignal stop;
  heterodl::SignalWatcher watcher([&stop](int signal) { stop.Trigger(signal); });
  heterodl::KeepGrpcUntilExit();
  absl::SetProgramUsageMessage(kUsage);
  std::string command = "launch";
  std::vector<std::string> arguments(argv, argv + argc);
  heterodl::NormalizeFlagNames(arguments);
  absl::flags_internal::SetProgramInvocationName(argv[0]);
  if (const std::optional<int> done = HandleHelpAndVersion(arguments)) return *done;
  std::vector<char*> args;
  for (std::string& argument : arguments) args.push_back(argument.data());
  if (argc > 1 && argv[1][0] != '-') {
    if (!IsCommand(argv[1])) {
      std::fprintf(stderr, "heterodl: unknown command '%s'\n\n%s\n", argv[1], kUsage);
      return heterodl::kExitUsage;
    }
    command = argv[1];
    args.erase(args.begin() + 1);
  }
  std::vector<char*> rest = absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
  std::vector<std::string> positional(rest.begin() + 1, rest.end());
  heterodl::SetLogTag(command);

  if (command == "serve") return heterodl::RunServeCommand(stop);
  if (command == "train") return heterodl::RunTrainCommand(stop);
  if (command == "local") return heterodl::RunLocalCommand(stop);
  if (command == "cluster") return heterodl::RunClusterCommand();
  if (command == "dataset") return heterodl::RunDatasetCommand(positional);
  if (command == "status") return heterodl::RunStatusCommand(positional);
  if (command == "bench") return heterodl::RunBenchCommand(positional);
  if (command == "plan") return heterodl::RunPlanCommand();
  return heterodl::RunLaunchCommand(positional, stop);
}
