// heterodl-trainer: one trainer rank, started by `heterodl train` with the
// rank's flags (see launcher/train_command.cc). The only executable that
// loads LibTorch.
#include <atomic>
#include <cstdlib>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "launcher/flags.h"
#include "launcher/stop_signal.h"
#include "launcher/trainer_flags.h"
#include "src/common/log.h"
#include "src/common/memory/malloc_tuning.h"
#include "src/common/process/signal_watcher.h"
#include "src/rpc/grpc_lifetime.h"
#include "src/rpc/grpc_logging.h"
#include "src/train/trainer.h"

namespace {

// How long a rank stopped before training began may take to wind down on
// its own before it ends itself: long enough for a rank waiting on its data
// servers to see the stop, far shorter than a rendezvous timeout.
constexpr absl::Duration kSetUpStopGrace = absl::Seconds(3);

}  // namespace

int main(int argc, char** argv) {
  heterodl::KeepFreedHeapMemory();
  heterodl::StopSignal stop;
  // A rank stopped while it joins the others may wait in the rendezvous for
  // a peer that already stopped (TCPStore takes no cancel): it has trained
  // nothing, so it ends itself, as a stop before training ends it (exit 0).
  static std::atomic<bool> training_began{false};
  heterodl::SignalWatcher watcher([&stop](int signal) {
    stop.Trigger(signal);
    if (!training_began.load()) {
      std::thread([] {
        absl::SleepFor(kSetUpStopGrace);
        if (!training_began.load()) {
          heterodl::LogInfo("stopped on request while joining the other ranks; nothing trained");
          std::_Exit(0);
        }
      }).detach();
    }
  });
  heterodl::KeepGrpcUntilExit();
  heterodl::RouteGrpcLogsToOurs();
  absl::ParseCommandLine(argc, argv);
  if (const auto level = heterodl::ParseLogLevel(absl::GetFlag(FLAGS_log_level))) {
    heterodl::SetMinLogLevel(*level);
  }

  absl::StatusOr<heterodl::TrainerOptions> parsed = heterodl::TrainerOptionsFromFlags();
  if (!parsed.ok()) {
    heterodl::LogError("%s", parsed.status().ToString());
    return 2;
  }
  heterodl::TrainerOptions& options = *parsed;
  options.stop_requested = &stop.stopped();
  options.training_began = &training_began;
  const heterodl::RendezvousOptions& rendezvous = options.rendezvous;
  heterodl::SetLogTag(absl::StrCat("train/", rendezvous.rank));
  if (rendezvous.rank < 0 || rendezvous.world_size <= 0 ||
      rendezvous.rank >= rendezvous.world_size || options.data.servers.empty()) {
    heterodl::LogError(
        "heterodl-trainer is started by 'heterodl train'; it needs --rank, "
        "--world_size and --data_servers (or --data_servers_file, --data_servers_dns)");
    return 2;
  }
  absl::Status result = heterodl::RunTrainerRank(options);
  if (!result.ok()) {
    heterodl::LogError("rank %d failed: %s", rendezvous.rank, result.ToString());
    return 1;
  }
  return 0;
}
