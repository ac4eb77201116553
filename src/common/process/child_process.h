// ChildProcess: a started program, owned until it is reaped.
//
//   ASSIGN_OR_RETURN(ChildProcess server,
//                    ChildProcess::Spawn({SelfExecutable(), "serve", ...}));
//   ...
//   std::optional<int> code = server.WaitFor(absl::Seconds(5));
//   if (!code) server.Kill();
//
// The destructor kills (SIGKILL) and reaps a child that is still running, so
// an error path never leaves orphans behind.
#ifndef HETERODL_SRC_COMMON_PROCESS_CHILD_PROCESS_H_
#define HETERODL_SRC_COMMON_PROCESS_CHILD_PROCESS_H_

#include <sys/types.h>

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace heterodl {

// What a child gets besides its arguments.
struct SpawnOptions {
  // Added to the inherited environment: "NAME=value" entries.
  std::vector<std::string> extra_env;
  // >= 0: this descriptor is the child's descriptor 3 (it may be
  // close-on-exec here); no other descriptor of this process that is
  // close-on-exec reaches the child.
  int pass_fd = -1;
  // The child leads a process group of its own, so a signal sent to this
  // process's group (a terminal's Ctrl-C) does not reach it: only what this
  // process forwards does.
  bool own_process_group = false;
  // The child starts with SIGTERM and SIGINT blocked (and every other
  // signal as by default): for a heterodl process, whose SignalWatcher takes
  // them from the start of main(). A signal sent while it is still loading
  // (LibTorch takes a few hundred milliseconds) then waits for that watcher,
  // instead of killing it by the default action before it can stop in
  // order. Other programs start with an empty mask.
  bool stop_signals_blocked = false;
};

class ChildProcess {
 public:
  // Starts argv[0] (a path, or a name looked up in PATH) with the given
  // arguments, inheriting stdio and the environment.
  static absl::StatusOr<ChildProcess> Spawn(const std::vector<std::string>& argv,
                                            const SpawnOptions& options = {});
  // The descriptor number `pass_fd` has in the child.
  static constexpr int kPassedFd = 3;

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !exit_code_.has_value(); }

  // Sends `signal` if the child is still running.
  void Signal(int signal);
  void Kill() { Signal(9); }

  // Exit code once the child has ended: its status, or 128 + signal number
  // when a signal ended it (as a shell reports it).
  int Wait();
  // As Wait(), but returns nullopt if the child still runs after `timeout`.
  std::optional<int> WaitFor(absl::Duration timeout);
  // Non-blocking: the exit code if the child has ended, else nullopt.
  std::optional<int> Poll();

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}

  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

// Absolute path of the running executable (/proc/self/exe), used to start
// copies of this binary in another role.
absl::StatusOr<std::string> SelfExecutable();

// Waits for a `heterodl serve --port_file PATH` child to write its bound port
// to PATH; nullopt when the child exits first, `timeout` passes or
// `*abandon` becomes true.
std::optional<int> AwaitPortFile(ChildProcess& server, const std::string& path,
                                 absl::Duration timeout,
                                 const std::atomic<bool>* abandon = nullptr);

}  // namespace heterodl

#endif  // HETERODL_SRC_COMMON_PROCESS_CHILD_PROCESS_H_
