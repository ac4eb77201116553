// StopSignal: how a SIGTERM/SIGINT received by main()'s SignalWatcher reaches
// the running command: a flag to poll and callbacks to run.
#ifndef HETERODL_LAUNCHER_STOP_SIGNAL_H_
#define HETERODL_LAUNCHER_STOP_SIGNAL_H_

#include <atomic>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace heterodl {

class StopSignal {
 public:
  // Runs `callback(signal)` on every signal from now on; at once if a signal
  // came already.
  void OnStop(std::function<void(int)> callback) ABSL_LOCKS_EXCLUDED(mu_) {
    int last;
    {
      absl::MutexLock lock(&mu_);
      callbacks_.push_back(callback);
      last = last_signal_;
    }
    if (last != 0) callback(last);
  }

  void Trigger(int signal) ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<std::function<void(int)>> callbacks;
    {
      absl::MutexLock lock(&mu_);
      last_signal_ = signal;
      callbacks = callbacks_;
    }
    stopped_.store(true);
    for (auto& callback : callbacks) callback(signal);
  }

  const std::atomic<bool>& stopped() const { return stopped_; }

 private:
  absl::Mutex mu_;
  std::vector<std::function<void(int)>> callbacks_ ABSL_GUARDED_BY(mu_);
  int last_signal_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> stopped_{false};
};

}  // namespace heterodl

#endif  // HETERODL_LAUNCHER_STOP_SIGNAL_H_
