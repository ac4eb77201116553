// `heterodl serve`: the data-group server.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "launcher/commands.h"
#include "launcher/flags.h"
#include "src/common/log.h"
#include "src/server/data_server.h"

namespace heterodl {
namespace {

// Written to a temporary name and renamed, so a reader never sees a partial
// port number.
bool WritePortFile(const std::string& path, int port) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream file(temporary, std::ios::trunc);
    if (!(file << port << "\n")) return false;
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  return !error;
}

}  // namespace

int RunServeCommand(StopSignal& stop) {
  DataServerOptions options;
  options.dataset = absl::GetFlag(FLAGS_dataset);
  options.synthetic_samples = absl::GetFlag(FLAGS_synthetic);
  if (options.dataset.empty() && options.synthetic_samples <= 0) {
    LogError("serve needs --dataset DIR (an image folder or a file list)");
    return kExitUsage;
  }
  options.pipeline = absl::GetFlag(FLAGS_pipeline);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.worker_nice = absl::GetFlag(FLAGS_worker_nice);
  if (options.worker_nice < 0 || options.worker_nice > 19) {
    LogError("serve: --worker-nice must be in [0, 19], got %d", options.worker_nice);
    return kExitUsage;
  }
  options.max_pixels = absl::GetFlag(FLAGS_max_pixels);
  absl::StatusOr<std::string> token = AuthTokenFromFlags();
  if (!token.ok()) {
    LogError("%s", token.status().ToString());
    return kExitUsage;
  }
  options.auth_token = *token;
  options.tls = TlsFromFlags();
  options.max_streams = absl::GetFlag(FLAGS_max_streams);
  options.pixel_port = absl::GetFlag(FLAGS_pixel_port);
  if (options.pixel_port < -1 || options.pixel_port > 65535) {
    LogError("serve: --pixel-port must be -1 (off), 0 (any free port) or a port, got %d",
             options.pixel_port);
    return kExitUsage;
  }
  options.max_stream_bytes =
      static_cast<uint64_t>(std::max<int64_t>(1, absl::GetFlag(FLAGS_max_stream_mb))) << 20;
  if (options.max_streams < 1) {
    LogError("--max-streams must be >= 1");
    return kExitUsage;
  }
  if (options.max_pixels < 1) {
    LogError("--max-pixels must be >= 1");
    return kExitUsage;
  }
  options.idle_timeout = absl::GetFlag(FLAGS_idle_timeout);
  options.startup_timeout = absl::GetFlag(FLAGS_startup_timeout);
  const int port = absl::GetFlag(FLAGS_port) >= 0 ? absl::GetFlag(FLAGS_port) : 50051;
  options.address = absl::GetFlag(FLAGS_address).empty() ? absl::StrCat("0.0.0.0:", port)
                                                         : absl::GetFlag(FLAGS_address);

  absl::StatusOr<std::unique_ptr<DataServer>> server = DataServer::Start(options);
  if (!server.ok()) {
    LogError("cannot start the data server: %s", server.status().ToString());
    return kExitFailure;
  }
  DataServer* running = server->get();
  const StopSignal::Subscription on_signal = stop.Subscribe(
      [running](int signal) { running->RequestStop(absl::StrCat("signal ", signal)); });
  LogInfo("listening on %s (port %d)", options.address, running->port());
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty() && !WritePortFile(port_file, running->port())) {
    LogError("cannot write the port file '%s'", port_file);
    running->RequestStop("port file");
    running->Wait().IgnoreError();
    return kExitFailure;
  }
  absl::Status ended = running->Wait();
  if (!ended.ok()) {
    LogError("data server failed: %s", ended.ToString());
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace heterodl
