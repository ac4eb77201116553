// build/heterodl, what users run: it blocks SIGTERM and SIGINT, then becomes
// heterodl-main (the launcher itself, beside it) in the same process.
//
// The launcher links some 200 shared libraries (gRPC, OpenCV, ...), which
// take tens of milliseconds to load, more on a busy host, before its main()
// can start the SignalWatcher that turns those signals into an orderly stop.
// A Ctrl-C in that time killed it by the default action (exit 130, its
// children left to their fate). A blocked signal survives exec and waits,
// pending, for the watcher's sigwait(); this program needs the C library
// alone, so the window shrinks to the moment the kernel takes to start it.
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

int main(int /*argc*/, char** argv) {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  char path[PATH_MAX];
  const ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (length <= 0) {
    std::fprintf(stderr, "heterodl: cannot find its own executable: %s\n", std::strerror(errno));
    return 1;
  }
  path[length] = '\0';
  char* slash = std::strrchr(path, '/');
  constexpr char kMain[] = "heterodl-main";
  if (slash == nullptr || static_cast<size_t>(slash + 1 - path) + sizeof(kMain) > sizeof(path)) {
    std::fprintf(stderr, "heterodl: its own path '%s' is unusable\n", path);
    return 1;
  }
  std::memcpy(slash + 1, kMain, sizeof(kMain));
  execv(path, argv);
  std::fprintf(stderr, "heterodl: cannot start %s: %s\n", path, std::strerror(errno));
  return 1;
}
