#include "src/common/process/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "src/common/net/unique_fd.h"
#include "src/common/read_file.h"

extern char** environ;

namespace heterodl {
namespace {

int DecodeWaitStatus(int status) {
  if (WIFEXITED(status)) {
    return WEXITSTATUS(status);
  }
  if (WIFSIGNALED(status)) {
    return 128 + WTERMSIG(status);
  }
  return -1;
}

}  // namespace

absl::StatusOr<ChildProcess> ChildProcess::Spawn(const std::vector<std::string>& argv,
                                                 const SpawnOptions& options) {
  if (argv.empty()) {
    return absl::InvalidArgumentError("empty argv");
  }
  std::vector<char*> args;
  args.reserve(argv.size());
  for (const std::string& arg : argv) {
    args.push_back(const_cast<char*>(arg.c_str()));
  }
  args.push_back(nullptr);

  std::vector<char*> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    env.push_back(*entry);
  }
  for (const std::string& entry : options.extra_env) {
    env.push_back(const_cast<char*>(entry.c_str()));
  }
  env.push_back(nullptr);

  // The child starts with default signal dispositions and an empty mask even
  // when the parent blocks SIGTERM/SIGINT for its signal-watching thread;
  // with stop_signals_blocked, with those two blocked.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t mask, default_signals;
  sigemptyset(&mask);
  if (options.stop_signals_blocked) {
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
  }
  sigemptyset(&default_signals);
  sigaddset(&default_signals, SIGTERM);
  sigaddset(&default_signals, SIGINT);
  sigaddset(&default_signals, SIGPIPE);
  posix_spawnattr_setsigmask(&attr, &mask);
  posix_spawnattr_setsigdefault(&attr, &default_signals);
  int16_t flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (options.own_process_group) {
    posix_spawnattr_setpgroup(&attr, 0);
    flags |= POSIX_SPAWN_SETPGROUP;
  }
  posix_spawnattr_setflags(&attr, flags);

  // dup2 clears close-on-exec on its target, unless source and target are
  // the same descriptor: then a copy elsewhere goes first.
  int pass_fd = options.pass_fd;
  UniqueFd moved;
  if (pass_fd == kPassedFd) {
    moved.reset(fcntl(pass_fd, F_DUPFD_CLOEXEC, kPassedFd + 1));
    if (!moved.valid()) {
      posix_spawnattr_destroy(&attr);
      return absl::InternalError(absl::StrCat("dup: ", std::strerror(errno)));
    }
    pass_fd = moved.get();
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (pass_fd >= 0) {
    posix_spawn_file_actions_adddup2(&actions, pass_fd, kPassedFd);
  }
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, args[0], &actions, &attr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return absl::InternalError(
        absl::StrCat("cannot start '", absl::StrJoin(argv, " "), "': ", std::strerror(rc)));
  }
  return ChildProcess(pid);
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      exit_code_(std::exchange(other.exit_code_, std::nullopt)) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    if (running()) {
      Kill();
      Wait();
    }
    pid_ = std::exchange(other.pid_, -1);
    exit_code_ = std::exchange(other.exit_code_, std::nullopt);
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  if (running()) {
    Kill();
    Wait();
  }
}

void ChildProcess::Signal(int signal) {
  if (running()) {
    ::kill(pid_, signal);
  }
}

int ChildProcess::Wait() {
  if (exit_code_) {
    return *exit_code_;
  }
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0) {
    if (errno != EINTR) {
      exit_code_ = -1;
      return -1;
    }
  }
  exit_code_ = DecodeWaitStatus(status);
  return *exit_code_;
}

std::optional<int> ChildProcess::Poll() {
  if (exit_code_ || pid_ <= 0) {
    return exit_code_;
  }
  int status = 0;
  pid_t rc = waitpid(pid_, &status, WNOHANG);
  if (rc == pid_) {
    exit_code_ = DecodeWaitStatus(status);
  } else if (rc < 0 && errno != EINTR) {
    exit_code_ = -1;
  }
  return exit_code_;
}

std::optional<int> ChildProcess::WaitFor(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (std::optional<int> code = Poll()) {
      return code;
    }
    if (absl::Now() >= deadline) {
      return std::nullopt;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

std::optional<int> AwaitPortFile(ChildProcess& server, const std::string& path,
                                 absl::Duration timeout, const std::atomic<bool>* abandon) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline && (abandon == nullptr || !abandon->load())) {
    absl::StatusOr<std::string> text = ReadFileToString(path);
    int port = 0;
    if (text.ok() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &port) && port > 0) {
      return port;
    }
    if (server.Poll()) {
      return std::nullopt;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return std::nullopt;
}

absl::StatusOr<std::string> SelfExecutable() {
  char buffer[4096];
  ssize_t length = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (length <= 0) {
    return absl::InternalError(absl::StrCat("readlink(/proc/self/exe): ", std::strerror(errno)));
  }
  return std::string(buffer, static_cast<size_t>(length));
}

}  // namespace heterodl
