// heterodl: one binary, every role. See docs/architecture.md.
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "launcher/command_line.h"
#include "launcher/command_table.h"
#include "launcher/commands.h"
#include "launcher/flag_checks.h"
#include "launcher/flags.h"
#include "launcher/stop_signal.h"
#include "src/common/log.h"
#include "src/common/memory/malloc_tuning.h"
#include "src/common/process/signal_watcher.h"
#include "src/rpc/grpc_lifetime.h"
#include "src/rpc/grpc_logging.h"

namespace {

// What --version prints: the project's version and how it was built.
std::string VersionText() {
#ifdef NDEBUG
  constexpr const char* kBuild = "optimized";
#else
  constexpr const char* kBuild = "debug";
#endif
  return absl::StrCat("heterodl ", HETERODL_VERSION, " (", kBuild, " build)\n");
}

// `heterodl help [COMMAND]`: stdout and 0, or 2 for a command that is not one.
int PrintHelp(const std::string& name) {
  if (name.empty()) {
    std::printf("%s\n", heterodl::ProgramUsage().c_str());
    return heterodl::kExitOk;
  }
  const heterodl::CommandInfo* command = heterodl::FindCommand(name);
  if (command == nullptr) {
    std::fprintf(stderr, "heterodl: no command '%s'%s\n\n%s\n", name.c_str(),
                 heterodl::SuggestCommand(name).c_str(), heterodl::ProgramUsage().c_str());
    return heterodl::kExitUsage;
  }
  std::fputs(heterodl::CommandHelp(*command).c_str(), stdout);
  return heterodl::kExitOk;
}

// --help, --helpfull and --version end here with exit code 0 (Abseil's own
// handling would exit 1 for help and print no version of ours). `command` is
// the one named on the command line, or "".
std::optional<int> HandleHelpAndVersion(const std::vector<std::string>& arguments,
                                        const std::string& command) {
  for (size_t i = 1; i < arguments.size(); ++i) {
    const std::string& argument = arguments[i];
    if (argument == "--") {
      break;
    }
    if (argument == "--version") {
      std::fputs(VersionText().c_str(), stdout);
      return heterodl::kExitOk;
    }
    if (argument == "--help" || argument == "-help" || argument == "-h" ||
        argument == "--helpshort") {
      return PrintHelp(command);
    }
    if (argument == "--helpfull") {
      std::fputs(heterodl::AllFlagsHelp().c_str(), stdout);
      return heterodl::kExitOk;
    }
  }
  return std::nullopt;
}

// Whether a cluster environment (SageMaker, Slurm, HETERODL_* variables)
// names this host's role; without one, a bare `heterodl` has nothing to do.
bool InClusterEnvironment() {
  absl::StatusOr<heterodl::ClusterView> view = heterodl::ResolveClusterView(
      heterodl::ClusterSettingsFromFlags(), heterodl::CurrentEnvironment());
  return !view.ok() || view->source != "local";
}

// A usage error: stderr, exit code 2.
int UsageError(const std::string& command, absl::string_view message) {
  std::fprintf(stderr, "heterodl %s: %s\n", command.c_str(), std::string(message).c_str());
  return heterodl::kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  heterodl::KeepFreedHeapMemory();
  // Before any thread starts: the watcher blocks SIGTERM/SIGINT for every
  // thread created after it, so only it receives them.
  heterodl::StopSignal stop;
  heterodl::SignalWatcher watcher([&stop](int signal) { stop.Trigger(signal); });
  heterodl::KeepGrpcUntilExit();
  heterodl::RouteGrpcLogsToOurs();
  absl::SetProgramUsageMessage(heterodl::ProgramUsage());

  std::vector<std::string> arguments(argv, argv + argc);
  std::string command;  // as named on the command line
  if (arguments.size() > 1 && !arguments[1].empty() && arguments[1][0] != '-') {
    if (arguments[1] == "help") {
      return PrintHelp(arguments.size() > 2 ? arguments[2] : "");
    }
    if (heterodl::FindCommand(arguments[1]) == nullptr) {
      std::fprintf(stderr, "heterodl: unknown command '%s'%s\n\n%s\n", argv[1],
                   heterodl::SuggestCommand(arguments[1]).c_str(),
                   heterodl::ProgramUsage().c_str());
      return heterodl::kExitUsage;
    }
    command = arguments[1];
    arguments.erase(arguments.begin() + 1);
  }
  const std::string name = command.empty() ? "launch" : command;
  heterodl::NormalizeFlagNames(arguments);
  absl::StatusOr<std::vector<std::string>> expanded = heterodl::ExpandFlagFiles(arguments);
  if (!expanded.ok()) {
    return UsageError(name, expanded.status().message());
  }
  if (const std::optional<int> done = HandleHelpAndVersion(*expanded, command)) {
    return *done;
  }
  std::set<std::string> given;
  if (absl::Status checked = heterodl::CheckFlagArguments(*expanded, &given); !checked.ok()) {
    return UsageError(name, checked.message());
  }
  std::vector<char*> args;
  for (std::string& argument : *expanded) {
    args.push_back(argument.data());
  }
  std::vector<char*> rest = absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
  std::vector<std::string> positional(rest.begin() + 1, rest.end());
  heterodl::SetLogTag(name);
  if (absl::Status valid = heterodl::CheckFlagValues(); !valid.ok()) {
    return UsageError(name, valid.message());
  }
  heterodl::SetMinLogLevel(*heterodl::ParseLogLevel(absl::GetFlag(FLAGS_log_level)));
  const heterodl::CommandInfo& info = *heterodl::FindCommand(name);
  if (name != "launch") {
    for (const std::string& flag : given) {
      if (!heterodl::CommandTakesFlag(info, flag)) {
        heterodl::LogWarning("%s does nothing for '%s' ('heterodl help %s' lists its flags)",
                             heterodl::DashedFlag(flag), name, name);
      }
    }
  }
  if (info.arguments[0] == '\0' && !positional.empty()) {
    return UsageError(name, absl::StrCat("takes no arguments, got '", positional.front(),
                                         "' (flags are written --name VALUE)"));
  }
  if (argc == 1 && !InClusterEnvironment()) {
    std::printf(
        "%s\n\nNo cluster environment here (SageMaker, Slurm or HETERODL_ROLE): name a "
        "command, e.g. 'heterodl local --dataset DIR'.\n",
        heterodl::ProgramUsage().c_str());
    return heterodl::kExitUsage;
  }

  return info.run({positional, stop});
}
