// `heterodl train`: starts this host's trainer ranks (one heterodl-trainer
// process each) and, on the leader host, tells the data servers to shut down
// when they end.
#include <signal.h>

#include <filesystem>
#include <optional>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "launcher/commands.h"
#include "launcher/flag_checks.h"
#include "launcher/flags.h"
#include "src/client/server_discovery.h"
#include "src/client/shutdown.h"
#include "src/common/log.h"
#include "src/common/process/child_process.h"
#include "src/common/status_macros.h"

namespace heterodl {
namespace {

// How long ranks get to stop after a peer failed, before SIGKILL.
constexpr absl::Duration kRankGrace = absl::Seconds(15);

// `metrics_port` >= 0: the leader rank (global rank 0) serves Prometheus
// metrics there.
std::vector<std::string> RankArguments(const std::string& trainer, const ClusterView& view,
                                       int global_rank, int local_rank, int metrics_port) {
  std::vector<std::string> argv = {
      trainer,
      absl::StrCat("--rank=", global_rank),
      absl::StrCat("--local_rank=", local_rank),
      absl::StrCat("--world_size=", view.world_size),
      absl::StrCat("--data_servers=", absl::StrJoin(view.data_servers.fixed, ",")),
      absl::StrCat("--data_servers_file=", view.data_servers.servers_file),
      absl::StrCat("--data_servers_dns=", view.data_servers.dns_name),
      absl::StrCat("--master_addr=", view.leader),
      absl::StrCat("--master_port=", view.master_port),
      absl::StrCat("--current_host=", view.current_host)};
  for (std::string& argument : TrainingFlagsAsArguments()) {
    argv.push_back(std::move(argument));
  }
  argv.push_back(absl::StrCat("--metrics_port=", global_rank == 0 ? metrics_port : -1));
  // The platform's directories (SageMaker's) unless given: a restarted job
  // resumes from its synced checkpoint. Later flags win.
  if (absl::GetFlag(FLAGS_checkpoint_dir).empty() && !view.checkpoint_dir.empty()) {
    argv.push_back(absl::StrCat("--checkpoint_dir=", view.checkpoint_dir));
    argv.push_back("--resume=true");
  }
  if (absl::GetFlag(FLAGS_model_dir).empty() && !view.model_dir.empty()) {
    argv.push_back(absl::StrCat("--model_dir=", view.model_dir));
  }
  return argv;
}

// Waits for every rank; when one fails, the others are stopped (a collective
// would otherwise wait for the dead peer until its timeout).
int SuperviseRanks(std::vector<ChildProcess>& ranks, StopSignal& stop) {
  std::optional<int> first_failure;
  std::optional<absl::Time> kill_at;
  const StopSignal::Subscription forward_signals = stop.Subscribe([&ranks](int signal) {
    for (ChildProcess& rank : ranks) {
      rank.Signal(signal);
    }
  });
  while (true) {
    bool all_done = true;
    for (size_t i = 0; i < ranks.size(); ++i) {
      std::optional<int> code = ranks[i].Poll();
      if (!code) {
        all_done = false;
        continue;
      }
      if (*code != 0 && !first_failure) {
        first_failure = *code;
        LogError("rank process %d exited with %d; stopping the others", i, *code);
        for (ChildProcess& rank : ranks) {
          rank.Signal(SIGTERM);
        }
        kill_at = absl::Now() + kRankGrace;
      }
    }
    if (all_done) {
      break;
    }
    if (kill_at && absl::Now() > *kill_at) {
      for (ChildProcess& rank : ranks) {
        rank.Kill();
      }
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return first_failure ? kExitFailure : kExitOk;
}

// The rank executable, installed next to this one. It is a separate binary
// so that LibTorch is never loaded into the launcher or a data server (it
// also exports libstdc++ symbols that would interpose on ours).
absl::StatusOr<std::string> TrainerExecutable() {
  ASSIGN_OR_RETURN(std::string self, SelfExecutable());
  const std::filesystem::path trainer =
      std::filesystem::path(self).parent_path() / "heterodl-trainer";
  std::error_code error;
  if (!std::filesystem::exists(trainer, error)) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", trainer.string(),
                     "' is missing: this heterodl was built without LibTorch "
                     "(HETERODL_WITH_TORCH=OFF) and can serve data but not train"));
  }
  return trainer.string();
}

}  // namespace

int RunTrainCommand(const CommandContext& context) {
  StopSignal& stop = context.stop;
  absl::StatusOr<ClusterView> resolved =
      ResolveClusterView(ClusterSettingsFromFlags(), CurrentEnvironment());
  if (!resolved.ok()) {
    LogError("%s", resolved.status().ToString());
    return kExitUsage;
  }
  ClusterView view = *resolved;
  const ServerSources& servers = view.data_servers;
  if (!ValidateServerSources(servers).ok()) {
    LogError(
        "train needs data servers: --data-servers host:port,..., --data-servers-file FILE or "
        "--data-servers-dns NAME (or a cluster environment that names them)");
    return kExitUsage;
  }
  if (absl::GetFlag(FLAGS_ranks) > 0) {
    view.ranks_per_host = absl::GetFlag(FLAGS_ranks);
    view.world_size = static_cast<int>(view.dnn_hosts.size()) * view.ranks_per_host;
  }
  if (view.node_rank < 0) {
    LogError("this host '%s' is not among the dnn hosts [%s]", view.current_host,
             absl::StrJoin(view.dnn_hosts, ", "));
    return kExitUsage;
  }
  const absl::StatusOr<int> metrics_port = MetricsPortFromFlags("train");
  if (!metrics_port.ok()) {
    LogError("%s", std::string(metrics_port.status().message()));
    return kExitUsage;
  }
  absl::StatusOr<std::string> trainer = TrainerExecutable();
  if (!trainer.ok()) {
    LogError("%s", trainer.status().ToString());
    return kExitFailure;
  }
  std::vector<ChildProcess> ranks;
  for (int local = 0; local < view.ranks_per_host && !stop.stopped().load(); ++local) {
    const int global_rank = view.node_rank * view.ranks_per_host + local;
    // A signal while a rank loads LibTorch waits for its watcher.
    absl::StatusOr<ChildProcess> child =
        ChildProcess::Spawn(RankArguments(*trainer, view, global_rank, local, *metrics_port),
                            {.stop_signals_blocked = true});
    if (!child.ok()) {
      LogError("%s", child.status().ToString());
      return kExitFailure;  // started ranks are killed by their destructors
    }
    ranks.push_back(std::move(*child));
  }
  // Stopped before every rank started: the started ones stop too (ranks
  // that stop before training begins exit 0), and the run ends as a stop on
  // request does.
  const int result = SuperviseRanks(ranks, stop);
  if (stop.stopped().load() && static_cast<int>(ranks.size()) < view.ranks_per_host) {
    LogInfo("stopped by a signal before every rank started");
  }
  if (view.node_rank == 0) {
    const std::string reason = result == kExitOk ? "training finished" : "training failed";
    // Those listed now: servers may have joined and left while it ran.
    const std::vector<std::string> listed = ServerDiscovery(servers).Refresh();
    LogInfo("%s; telling %d data server(s) to shut down", reason, listed.size());
    absl::StatusOr<std::string> token = AuthTokenFromFlags();
    absl::Status shutdown =
        token.ok() ? ShutdownDataServers(listed, reason, absl::Seconds(10), *token, TlsFromFlags())
                   : token.status();
    if (!shutdown.ok()) {
      LogWarning("%s", shutdown.ToString());
    }
  }
  return result;
}

}  // namespace heterodl
