// `heterodl local`: a whole heterogeneous job on this machine. Starts N data
// servers and a trainer with M ranks as child processes on loopback; the
// trainer's leader shuts the servers down at the end. Leaves no process
// behind: children still running at the end are stopped and reported.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "launcher/commands.h"
#include "launcher/flags.h"
#include "launcher/trainer_flags.h"
#include "src/common/log.h"
#include "src/common/net/host_port.h"
#include "src/common/process/child_process.h"
#include "src/common/status_macros.h"
#include "src/storage/object_url.h"

namespace heterodl {
namespace {

// How long servers get to exit after the trainer's shutdown request.
constexpr absl::Duration kServerExitGrace = absl::Seconds(10);

// Starts the servers one after another and waits for each to listen; their
// addresses in `addresses`. Servers started before a failure are stopped by
// their destructors. CANCELLED when `stopped` becomes true meanwhile.
absl::Status StartServers(const LocalRun& run, const std::atomic<bool>& stopped,
                          std::vector<ChildProcess>& servers, std::vector<std::string>& addresses) {
  for (int i = 0; i < run.servers; ++i) {
    const std::string port_file = (run.run_dir / absl::StrCat("server", i, ".port")).string();
    std::vector<std::string> argv = {
        run.self,
        "serve",
        "--address=127.0.0.1:0",
        absl::StrCat("--port_file=", port_file),
        absl::StrCat("--threads=", run.threads),
        "--idle_timeout=60s",
        "--startup_timeout=300s",
        absl::StrCat("--auth_token_file=", absl::GetFlag(FLAGS_auth_token_file)),
        absl::StrCat("--tls_cert=", absl::GetFlag(FLAGS_tls_cert)),
        absl::StrCat("--tls_key=", absl::GetFlag(FLAGS_tls_key)),
        absl::StrCat("--tls_ca=", absl::GetFlag(FLAGS_tls_ca)),
        absl::StrCat("--log_level=", absl::GetFlag(FLAGS_log_level))};
    argv.insert(argv.end(), run.data_arguments.begin(), run.data_arguments.end());
    absl::StatusOr<ChildProcess> server =
        ChildProcess::Spawn(argv,
                            // Out of the terminal's group: a Ctrl-C must not stop a server
                            // before the ranks' last step, whose batches it still serves (the
                            // ranks agree on that step only every few steps).
                            {.own_process_group = true, .stop_signals_blocked = true});
    if (!server.ok()) {
      return server.status();
    }
    servers.push_back(*std::move(server));
    const std::optional<int> port =
        AwaitPortFile(servers.back(), port_file, absl::Seconds(60), &stopped);
    if (stopped.load()) {
      return absl::CancelledError("stopped by a signal while the data servers started");
    }
    if (!port) {
      return absl::UnavailableError(
          absl::StrCat("data server ", i, " did not start (see its log above)"));
    }
    addresses.push_back(absl::StrCat("127.0.0.1:", *port));
  }
  return absl::OkStatus();
}

// `heterodl train` with the run's ranks against `addresses`, and the
// training flags given to `local`.
absl::StatusOr<ChildProcess> StartTrainer(const LocalRun& run,
                                          const std::vector<std::string>& addresses) {
  ASSIGN_OR_RETURN(const int rendezvous_port, PickFreeLoopbackPort());
  std::vector<std::string> argv = {run.self,
                                   "train",
                                   absl::StrCat("--data_servers=", absl::StrJoin(addresses, ",")),
                                   absl::StrCat("--ranks=", run.ranks),
                                   "--dnn_hosts=127.0.0.1",
                                   "--current_host=127.0.0.1",
                                   absl::StrCat("--master_port=", rendezvous_port)};
  for (std::string& argument : TrainingFlagsAsArguments()) {
    argv.push_back(std::move(argument));
  }
  // The trainer's leader serves the metrics (train reads
  // $HETERODL_METRICS_PORT itself when the flag is not given).
  argv.push_back(absl::StrCat("--metrics_port=", absl::GetFlag(FLAGS_metrics_port)));
  return ChildProcess::Spawn(argv, {.stop_signals_blocked = true});
}

// Stops servers that no trainer will shut down: SIGTERM, which they obey at
// once (exit 0), then SIGKILL for one that does not. True when all exited 0.
bool StopServers(std::vector<ChildProcess>& servers) {
  for (ChildProcess& server : servers) {
    server.Signal(SIGTERM);
  }
  bool in_order = true;
  for (size_t i = 0; i < servers.size(); ++i) {
    std::optional<int> code = servers[i].WaitFor(absl::Seconds(5));
    if (!code) {
      LogError("data server %d did not stop within 5s of SIGTERM; killing it", i);
      servers[i].Kill();
      in_order = false;
    } else if (*code != 0) {
      LogError("data server %d exited with %d", i, *code);
      in_order = false;
    }
  }
  return in_order;
}

// After the trainer: each server must leave within the grace it has after
// the leader's shutdown request, and exit 0. False (after stopping and
// reporting the ones that did not) otherwise.
bool ServersEndedInOrder(std::vector<ChildProcess>& servers) {
  bool in_order = true;
  for (size_t i = 0; i < servers.size(); ++i) {
    const std::optional<int> code = servers[i].WaitFor(kServerExitGrace);
    if (!code) {
      LogError("data server %d still running %s after the trainer ended; stopping it", i,
               absl::FormatDuration(kServerExitGrace));
      servers[i].Signal(SIGTERM);
      if (!servers[i].WaitFor(absl::Seconds(5))) {
        servers[i].Kill();
      }
      in_order = false;
    } else if (*code != 0) {
      LogError("data server %d exited with %d", i, *code);
      in_order = false;
    }
  }
  return in_order;
}

}  // namespace

absl::StatusOr<LocalRun> LocalRunFromFlags() {
  LocalRun run;
  const std::string dataset = absl::GetFlag(FLAGS_dataset);
  const std::string python_dataset = absl::GetFlag(FLAGS_python_dataset);
  if (dataset.empty() == python_dataset.empty()) {
    return absl::InvalidArgumentError(
        "local needs one of --dataset DIR (e.g. one written by 'heterodl dataset sample DIR') "
        "and --python-dataset MODULE:CALLABLE");
  }
  if (!absl::GetFlag(FLAGS_data_servers).empty()) {
    return absl::InvalidArgumentError(
        "local starts its own data servers: --servers N says how many (--data-servers is "
        "train's list of addresses)");
  }
  run.servers = absl::GetFlag(FLAGS_servers);
  if (absl::GetFlag(FLAGS_ranks) > 0) {
    run.ranks = absl::GetFlag(FLAGS_ranks);
  }
  // Each server takes an equal share of the cores; the ranks take the rest
  // of the time slices.
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  run.threads = absl::GetFlag(FLAGS_threads) > 0 ? absl::GetFlag(FLAGS_threads)
                                                 : std::max(1, cores / run.servers);
  if (python_dataset.empty()) {
    run.data_arguments = {absl::StrCat("--dataset=", dataset),
                          absl::StrCat("--pipeline=", absl::GetFlag(FLAGS_pipeline))};
    // The TFRecord keys where they are not the defaults.
    for (const char* name : {"tfrecord_image_key", "tfrecord_label_key", "tfrecord_label_offset",
                             "tfrecord_mask_key"}) {
      const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
      if (flag != nullptr && flag->CurrentValue() != flag->DefaultValue()) {
        run.data_arguments.push_back(absl::StrCat("--", name, "=", flag->CurrentValue()));
      }
    }
    // How a bucket is read matters only to a dataset in one.
    if (IsObjectUrl(dataset)) {
      for (std::string& argument : ObjectStorageServeArguments()) {
        run.data_arguments.push_back(std::move(argument));
      }
    }
  } else {
    if (!absl::GetFlag(FLAGS_pipeline).empty()) {
      return absl::InvalidArgumentError(
          "--pipeline does not apply to --python-dataset: its samples are what its "
          "__getitem__ returns");
    }
    // Each server's share of the cores, as its threads are for --dataset.
    const int workers =
        absl::GetFlag(FLAGS_python_workers) > 0 ? absl::GetFlag(FLAGS_python_workers) : run.threads;
    run.data_arguments = {
        absl::StrCat("--python_dataset=", python_dataset),
        absl::StrCat("--python_path=", absl::StrJoin(absl::GetFlag(FLAGS_python_path), ",")),
        absl::StrCat("--python_workers=", workers),
        absl::StrCat("--python=", absl::GetFlag(FLAGS_python)),
        absl::StrCat("--python_sample_timeout=",
                     absl::FormatDuration(absl::GetFlag(FLAGS_python_sample_timeout)))};
  }
  run.run_dir = std::filesystem::temp_directory_path() / absl::StrCat("heterodl-local-", getpid());
  // The ranks' own settings, refused now rather than after the servers start.
  RETURN_IF_ERROR(TrainerOptionsFromFlags().status());
  return run;
}

int RunLocalCommand(const CommandContext& context) {
  StopSignal& stop = context.stop;
  absl::StatusOr<LocalRun> run = LocalRunFromFlags();
  if (!run.ok()) {
    LogError("%s", run.status().message());
    return kExitUsage;
  }
  absl::StatusOr<std::string> self = SelfExecutable();
  if (!self.ok()) {
    LogError("%s", self.status().ToString());
    return kExitFailure;
  }
  run->self = *self;
  std::error_code error;
  std::filesystem::create_directories(run->run_dir, error);

  std::vector<ChildProcess> servers;
  std::vector<std::string> addresses;
  absl::Status started = StartServers(*run, stop.stopped(), servers, addresses);
  if (started.ok() && stop.stopped().load()) {
    started = absl::CancelledError("stopped by a signal before the trainer started");
  }
  if (absl::IsCancelled(started)) {
    // Nothing trained, so nothing to save: the servers go, and the run ends
    // as a stop on request does.
    const bool servers_stopped = StopServers(servers);
    std::filesystem::remove_all(run->run_dir, error);
    LogInfo("local run interrupted before training began (%s)", started.message());
    return servers_stopped ? kExitOk : kExitFailure;
  }
  if (!started.ok()) {
    LogError("%s", started.ToString());
    return kExitFailure;
  }
  LogInfo("%d data server(s) up at %s; starting %d trainer rank(s)", run->servers,
          absl::StrJoin(addresses, ","), run->ranks);
  absl::StatusOr<ChildProcess> trainer = StartTrainer(*run, addresses);
  if (!trainer.ok()) {
    LogError("%s", trainer.status().ToString());
    return kExitFailure;
  }
  // A signal goes to the trainer: its ranks stop after the same step (and
  // checkpoint), and its leader shuts the servers down, which still serve
  // that step's batches. A second signal stops the servers too. (Ctrl-C in
  // a terminal reaches the trainer's processes at once anyway: they share
  // its group; the servers lead groups of their own.)
  int signals_seen = 0;  // only touched by the subscription's callback
  const StopSignal::Subscription forward_signals = stop.Subscribe([&](int signal) {
    trainer->Signal(signal);
    if (++signals_seen > 1) {
      for (ChildProcess& server : servers) {
        server.Signal(signal);
      }
    }
  });
  const int trainer_code = trainer->Wait();
  const bool servers_ended = ServersEndedInOrder(servers);
  const int result = trainer_code == 0 && servers_ended ? kExitOk : kExitFailure;
  std::filesystem::remove_all(run->run_dir, error);
  if (stop.stopped().load() && result == kExitOk) {
    const std::string checkpoints = absl::GetFlag(FLAGS_checkpoint_dir);
    LogInfo("local run interrupted: every rank stopped after the same step; %s",
            checkpoints.empty()
                ? "nothing was saved (with --checkpoint-dir DIR a run can be resumed)"
                : absl::StrCat("to continue, run the same command with --resume (checkpoint in ",
                               checkpoints, ")"));
    return result;
  }
  LogInfo("local run %s (trainer exit %d)", result == kExitOk ? "finished" : "FAILED",
          trainer_code);
  return result;
}

}  // namespace heterodl
