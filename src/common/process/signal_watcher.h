// SignalWatcher: turns SIGTERM and SIGINT into a callback on a thread of its
// own, so shutdown logic runs as ordinary code (locks, RPCs, logging) instead
// of inside an async signal handler.
//
//   SignalWatcher watcher([&](int signal) { server.RequestStop(); });
//
// Construct it in main() before any other thread starts: it blocks the two
// signals in the calling thread, and threads started later inherit the mask,
// so only the watcher's sigwait() receives them.
#ifndef HETERODL_SRC_COMMON_PROCESS_SIGNAL_WATCHER_H_
#define HETERODL_SRC_COMMON_PROCESS_SIGNAL_WATCHER_H_

#include <functional>
#include <thread>

namespace heterodl {

class SignalWatcher {
 public:
  // `on_signal` runs on the watcher thread once per signal received.
  explicit SignalWatcher(std::function<void(int signal)> on_signal);
  ~SignalWatcher();

  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

 private:
  std::function<void(int)> on_signal_;
  std::thread thread_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_COMMON_PROCESS_SIGNAL_WATCHER_H_
