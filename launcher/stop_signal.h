// StopSignal: how a SIGTERM/SIGINT received by main()'s SignalWatcher reaches
// the running command: a flag to poll, and callbacks registered for a scope.
//
//   StopSignal::Subscription on_stop =
//       stop.Subscribe([&](int signal) { child.Signal(signal); });
//   ...  // the callback runs on signals until `on_stop` goes out of scope
#ifndef HETERODL_LAUNCHER_STOP_SIGNAL_H_
#define HETERODL_LAUNCHER_STOP_SIGNAL_H_

#include <atomic>
#include <functional>
#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace heterodl {

class StopSignal {
 public:
  // Unregisters its callback when destroyed, so a callback never outlives
  // what it refers to. Destruction waits for a running callback to finish.
  class Subscription {
   public:
    Subscription(StopSignal* signal, int id) : signal_(signal), id_(id) {}
    Subscription(Subscription&& other) noexcept
        : signal_(std::exchange(other.signal_, nullptr)), id_(other.id_) {}
    Subscription(const Subscription&) = delete;
    Subscription& operator=(const Subscription&) = delete;
    Subscription& operator=(Subscription&&) = delete;
    ~Subscription() {
      if (signal_ != nullptr) {
        signal_->Unsubscribe(id_);
      }
    }

   private:
    StopSignal* signal_;
    int id_;
  };

  // Runs `callback(signal)` on every signal while the returned Subscription
  // lives; at once if a signal came already.
  [[nodiscard]] Subscription Subscribe(std::function<void(int)> callback) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    const int id = next_id_++;
    callbacks_.emplace(id, std::move(callback));
    if (last_signal_ != 0) {
      callbacks_.at(id)(last_signal_);
    }
    return Subscription(this, id);
  }

  void Trigger(int signal) ABSL_LOCKS_EXCLUDED(mu_) {
    stopped_.store(true);
    absl::MutexLock lock(&mu_);
    last_signal_ = signal;
    for (auto& [id, callback] : callbacks_) {
      callback(signal);
    }
  }

  const std::atomic<bool>& stopped() const { return stopped_; }

 private:
  void Unsubscribe(int id) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    callbacks_.erase(id);
  }

  // Held while callbacks run, so Unsubscribe() cannot return during one.
  absl::Mutex mu_;
  std::map<int, std::function<void(int)>> callbacks_ ABSL_GUARDED_BY(mu_);
  int next_id_ ABSL_GUARDED_BY(mu_) = 0;
  int last_signal_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> stopped_{false};
};

}  // namespace heterodl

#endif  // HETERODL_LAUNCHER_STOP_SIGNAL_H_
