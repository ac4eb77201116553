#include "src/common/process/signal_watcher.h"

#include <pthread.h>
#include <signal.h>

#include <utility>

namespace heterodl {
namespace {

// SIGUSR2 is not forwarded to the callback: the destructor sends it to wake
// the watcher thread out of sigwait().
sigset_t WatchedSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR2);
  return set;
}

}  // namespace

SignalWatcher::SignalWatcher(std::function<void(int)> on_signal)
    : on_signal_(std::move(on_signal)) {
  sigset_t set = WatchedSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  thread_ = std::thread([this] {
    sigset_t watched = WatchedSignals();
    while (true) {
      int signal = 0;
      if (sigwait(&watched, &signal) != 0) {
        continue;
      }
      if (signal == SIGUSR2) {
        return;
      }
      on_signal_(signal);
    }
  });
}

SignalWatcher::~SignalWatcher() {
  pthread_kill(thread_.native_handle(), SIGUSR2);
  thread_.join();
}

}  // namespace heterodl
