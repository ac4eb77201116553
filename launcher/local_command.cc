// `heterodl local`: a whole heterogeneous job on this machine. Starts N data
// servers and a trainer with M ranks as child processes on loopback; the
// trainer's leader shuts the servers down at the end. Leaves no process
// behind: children still running at the end are stopped and reported.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "launcher/commands.h"
#include "launcher/flags.h"
#include "src/common/child_process.h"
#include "src/common/log.h"

namespace heterodl {
namespace {

// How long servers get to exit after the trainer's shutdown request.
constexpr absl::Duration kServerExitGrace = absl::Seconds(10);

// A TCP port free on loopback right now, for the rendezvous store (which
// binds it again moments later; the store reports a clear error in the
// unlikely case another process took it in between).
absl::StatusOr<int> PickFreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  const int error = errno;
  ::close(fd);
  if (!ok) return absl::UnavailableError(absl::StrCat("no free port: ", std::strerror(error)));
  return static_cast<int>(ntohs(address.sin_port));
}

}  // namespace

int RunLocalCommand(StopSignal& stop) {
  const std::string dataset = absl::GetFlag(FLAGS_dataset);
  if (dataset.empty()) {
    LogError("local needs --dataset DIR (e.g. one written by 'heterodl dataset sample DIR')");
    return kExitUsage;
  }
  int num_servers = 2;
  const std::string servers_flag = absl::GetFlag(FLAGS_data_servers);
  if (!servers_flag.empty() &&
      (!absl::SimpleAtoi(servers_flag, &num_servers) || num_servers < 1 || num_servers > 64)) {
    LogError("local: --data_servers is the number of servers to start (1-64), got '%s'",
             servers_flag);
    return kExitUsage;
  }
  const int ranks = absl::GetFlag(FLAGS_ranks) > 0 ? absl::GetFlag(FLAGS_ranks) : 2;
  absl::StatusOr<std::string> self = SelfExecutable();
  if (!self.ok()) {
    LogError("%s", self.status().ToString());
    return kExitFailure;
  }
  std::error_code error;
  const std::filesystem::path run_dir =
      std::filesystem::temp_directory_path() / absl::StrCat("heterodl-local-", getpid());
  std::filesystem::create_directories(run_dir, error);

  // Each server takes an equal share of the cores; the ranks take the rest of
  // the time slices.
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int threads = absl::GetFlag(FLAGS_threads) > 0 ? absl::GetFlag(FLAGS_threads)
                                                       : std::max(1, cores / num_servers);
  std::vector<ChildProcess> servers;
  std::vector<std::string> addresses;
  for (int i = 0; i < num_servers; ++i) {
    const std::string port_file = (run_dir / absl::StrCat("server", i, ".port")).string();
    absl::StatusOr<ChildProcess> server = ChildProcess::Spawn(
        {*self, "serve", absl::StrCat("--dataset=", dataset),
         absl::StrCat("--pipeline=", absl::GetFlag(FLAGS_pipeline)), "--address=127.0.0.1:0",
         absl::StrCat("--port_file=", port_file), absl::StrCat("--threads=", threads),
         "--idle_timeout=60s", "--startup_timeout=300s",
         absl::StrCat("--auth_token_file=", absl::GetFlag(FLAGS_auth_token_file)),
         absl::StrCat("--tls_cert=", absl::GetFlag(FLAGS_tls_cert)),
         absl::StrCat("--tls_key=", absl::GetFlag(FLAGS_tls_key)),
         absl::StrCat("--tls_ca=", absl::GetFlag(FLAGS_tls_ca))});
    if (!server.ok()) {
      LogError("%s", server.status().ToString());
      return kExitFailure;
    }
    servers.push_back(std::move(*server));
    std::optional<int> port = AwaitPortFile(servers.back(), port_file, absl::Seconds(60));
    if (!port) {
      LogError("data server %d did not start (see its log above)", i);
      return kExitFailure;  // destructors stop the servers already started
    }
    addresses.push_back(absl::StrCat("127.0.0.1:", *port));
  }
  LogInfo("%d data server(s) up at %s; starting %d trainer rank(s)", num_servers,
          absl::StrJoin(addresses, ","), ranks);

  absl::StatusOr<int> rendezvous_port = PickFreePort();
  if (!rendezvous_port.ok()) {
    LogError("%s", rendezvous_port.status().ToString());
    return kExitFailure;
  }
  std::vector<std::string> trainer_argv = {
      *self,
      "train",
      absl::StrCat("--data_servers=", absl::StrJoin(addresses, ",")),
      absl::StrCat("--ranks=", ranks),
      "--role=dnn",
      "--dnn_hosts=127.0.0.1",
      "--current_host=127.0.0.1",
      absl::StrCat("--master_port=", *rendezvous_port)};
  for (std::string& argument : TrainingFlagsAsArguments()) {
    trainer_argv.push_back(std::move(argument));
  }
  absl::StatusOr<ChildProcess> trainer = ChildProcess::Spawn(trainer_argv);
  if (!trainer.ok()) {
    LogError("%s", trainer.status().ToString());
    return kExitFailure;
  }
  // Signals go to every child: the trainer stops and shuts the servers down;
  // the servers stop on their own too.
  const StopSignal::Subscription forward_signals = stop.Subscribe([&](int signal) {
    trainer->Signal(signal);
    for (ChildProcess& server : servers) server.Signal(signal);
  });
  const int trainer_code = trainer->Wait();

  int result = trainer_code == 0 ? kExitOk : kExitFailure;
  for (size_t i = 0; i < servers.size(); ++i) {
    std::optional<int> code = servers[i].WaitFor(kServerExitGrace);
    if (!code) {
      LogError("data server %d still running %s after the trainer ended; stopping it", i,
               absl::FormatDuration(kServerExitGrace));
      servers[i].Signal(SIGTERM);
      if (!servers[i].WaitFor(absl::Seconds(5))) servers[i].Kill();
      result = kExitFailure;
    } else if (*code != 0) {
      LogError("data server %d exited with %d", i, *code);
      result = kExitFailure;
    }
  }
  std::filesystem::remove_all(run_dir, error);
  LogInfo("local run %s (trainer exit %d)", result == kExitOk ? "finished" : "FAILED",
          trainer_code);
  return result;
}

}  // namespace heterodl
