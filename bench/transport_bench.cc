#include "bench/transport_bench.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "heterodl/bench.pb.h"
#include "src/client/remote_loader.h"
#include "src/common/process/child_process.h"
#include "src/common/proto_json.h"
#include "src/common/status_macros.h"

namespace heterodl {
namespace {

constexpr double kGigabyte = 1e9;

double ProcessCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

double ThreadCpuSeconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return now.tv_sec + now.tv_nsec / 1e9;
}

struct Measurement {
  double gigabytes_per_sec = 0;
  double batches_per_sec = 0;
  double cpu_seconds_per_gigabyte = 0;
};

// Starts `heterodl serve --synthetic` on a free loopback port.
absl::StatusOr<std::pair<ChildProcess, std::string>> StartServer(
    const TransportBenchOptions& options) {
  const std::string port_file =
      (std::filesystem::temp_directory_path() / absl::StrCat("heterodl-transport-", getpid()))
          .string();
  std::filesystem::remove(port_file);
  ASSIGN_OR_RETURN(
      ChildProcess server,
      ChildProcess::Spawn({options.heterodl, "serve", "--synthetic=1000000",
                           absl::StrCat("--pipeline=center_crop(", options.image_size, ")"),
                           "--address=127.0.0.1:0", absl::StrCat("--port_file=", port_file),
                           absl::StrCat("--threads=", options.server_threads), "--idle_timeout=30s",
                           "--startup_timeout=60s"}));
  const std::optional<int> port = AwaitPortFile(server, port_file, absl::Seconds(30));
  std::filesystem::remove(port_file);
  if (!port) {
    return absl::UnavailableError("the synthetic data server did not start");
  }
  return std::make_pair(std::move(server), absl::StrCat("127.0.0.1:", *port));
}

// The loader pulling batches for `seconds`; `pixel_channel` false keeps the
// pixels inside the gRPC stream.
absl::StatusOr<Measurement> MeasureLoader(const std::string& address, int batch_size,
                                          int connections, bool pixel_channel, double seconds) {
  RemoteLoaderOptions options;
  options.pixel_channel = pixel_channel;
  options.connections_per_server = connections;
  options.servers.fixed = {address};
  options.batch_size = static_cast<uint32_t>(batch_size);
  options.connect_timeout = absl::Seconds(30);
  ASSIGN_OR_RETURN(std::unique_ptr<RemoteLoader> loader, RemoteLoader::Connect(options));
  uint32_t epoch = 0;
  RETURN_IF_ERROR(loader->SetEpoch(epoch));
  // Warm-up: connection, first allocations.
  for (int i = 0; i < 3; ++i) {
    RETURN_IF_ERROR(loader->Next().status());
  }
  double bytes = 0;
  int64_t batches = 0;
  const double cpu_start = ProcessCpuSeconds();
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Seconds(seconds)) {
    ASSIGN_OR_RETURN(std::optional<Batch> batch, loader->Next());
    if (!batch) {
      RETURN_IF_ERROR(loader->SetEpoch(++epoch));
      continue;
    }
    bytes += static_cast<double>(batch->payload.size());
    ++batches;
  }
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  const double cpu = ProcessCpuSeconds() - cpu_start;
  return Measurement{bytes / elapsed / kGigabyte, batches / elapsed, cpu / (bytes / kGigabyte)};
}

// A loopback socket pair: a writer thread sends `message_bytes`-sized
// messages as fast as it can; this thread reads them into one buffer.
absl::StatusOr<Measurement> MeasureTcp(size_t message_bytes, double seconds) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return absl::UnavailableError(absl::StrCat("loopback socket: ", std::strerror(errno)));
  }
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      return;
    }
    std::vector<uint8_t> message(message_bytes, 7);
    while (!stop.load()) {
      size_t sent = 0;
      while (sent < message.size()) {
        const ssize_t n = ::send(fd, message.data() + sent, message.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) {
          ::close(fd);
          return;
        }
        sent += static_cast<size_t>(n);
      }
    }
    ::close(fd);
  });
  const int fd = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  std::vector<uint8_t> buffer(message_bytes);
  double bytes = 0;
  int64_t messages = 0;
  const double cpu_start = ThreadCpuSeconds();
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Seconds(seconds)) {
    size_t received = 0;
    while (received < buffer.size()) {
      const ssize_t n = ::recv(fd, buffer.data() + received, buffer.size() - received, 0);
      if (n <= 0) {
        break;
      }
      received += static_cast<size_t>(n);
    }
    bytes += static_cast<double>(received);
    ++messages;
  }
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  const double cpu = ThreadCpuSeconds() - cpu_start;
  stop = true;
  ::close(fd);  // the writer's next send fails and it returns
  writer.join();
  return Measurement{bytes / elapsed / kGigabyte, messages / elapsed, cpu / (bytes / kGigabyte)};
}

std::string FormatTable(const v1::TransportBenchReport& report) {
  std::string text = absl::StrFormat(
      "transport benchmark: batches of %dx%dx3 uint8 on loopback, %.1f s per run\n"
      "loader: heterodl serve --synthetic (child process, pre-built batches) -> RemoteLoader "
      "over %d connection(s), pixels on pixel channels; gRPC only: the same with the pixels in "
      "the gRPC stream (the TLS path); TCP: a raw socket pump of the same bytes, one "
      "connection\n\n"
      "  %6s %6s | %7s %9s %8s | %7s %8s | %7s %9s %8s | %6s %6s\n",
      report.height(), report.width(), report.seconds_per_run(), report.connections(), "batch",
      "MB", "GB/s", "batches/s", "cpu s/GB", "gRPC GB/s", "cpu s/GB", "TCP GB/s", "batches/s",
      "cpu s/GB", "ratio", "gRPC");
  absl::StrAppendFormat(&text, "  %6s %6s | %-26s | %-17s | %-27s | %-13s\n", "", "", "loader",
                        "gRPC only", "raw TCP", "vs TCP");
  for (const v1::TransportRow& row : report.rows()) {
    absl::StrAppendFormat(
        &text, "  %6d %6.1f | %7.2f %9.1f %8.3f | %9.2f %8.3f | %8.2f %9.1f %8.3f | %6.2f %6.2f\n",
        row.batch_size(), row.batch_megabytes(), row.loader_gigabytes_per_sec(),
        row.loader_batches_per_sec(), row.loader_client_cpu_seconds_per_gigabyte(),
        row.grpc_only_gigabytes_per_sec(), row.grpc_only_client_cpu_seconds_per_gigabyte(),
        row.tcp_gigabytes_per_sec(), row.tcp_batches_per_sec(),
        row.tcp_client_cpu_seconds_per_gigabyte(), row.ratio_vs_tcp(),
        row.grpc_only_ratio_vs_tcp());
  }
  absl::StrAppendFormat(&text,
                        "\nat batch %d: %.2f of raw TCP throughput, client %.3f core-seconds "
                        "per GB (gRPC only: %.2f, %.3f)\n",
                        report.summary_batch_size(), report.ratio_vs_tcp(),
                        report.client_cpu_seconds_per_gigabyte(), report.grpc_only_ratio_vs_tcp(),
                        report.grpc_only_client_cpu_seconds_per_gigabyte());
  return text;
}

}  // namespace

absl::StatusOr<std::string> RunTransportBench(const TransportBenchOptions& options) {
  ASSIGN_OR_RETURN(auto server, StartServer(options));
  v1::TransportBenchReport report;
  report.set_seconds_per_run(options.seconds);
  report.set_height(options.image_size);
  report.set_width(options.image_size);
  report.set_connections(static_cast<uint32_t>(options.connections));
  absl::Status failure;
  for (int batch_size : options.batch_sizes) {
    const size_t bytes =
        static_cast<size_t>(batch_size) * options.image_size * options.image_size * 3;
    absl::StatusOr<Measurement> loader =
        MeasureLoader(server.second, batch_size, options.connections, true, options.seconds);
    absl::StatusOr<Measurement> grpc_only =
        MeasureLoader(server.second, batch_size, options.connections, false, options.seconds);
    absl::StatusOr<Measurement> tcp = MeasureTcp(bytes, options.seconds);
    for (const absl::Status& status : {loader.status(), grpc_only.status(), tcp.status()}) {
      if (failure.ok()) {
        failure = status;
      }
    }
    if (!failure.ok()) {
      break;
    }
    v1::TransportRow* row = report.add_rows();
    row->set_batch_size(batch_size);
    row->set_batch_megabytes(bytes / 1e6);
    row->set_loader_gigabytes_per_sec(loader->gigabytes_per_sec);
    row->set_loader_batches_per_sec(loader->batches_per_sec);
    row->set_loader_client_cpu_seconds_per_gigabyte(loader->cpu_seconds_per_gigabyte);
    row->set_grpc_only_gigabytes_per_sec(grpc_only->gigabytes_per_sec);
    row->set_grpc_only_client_cpu_seconds_per_gigabyte(grpc_only->cpu_seconds_per_gigabyte);
    row->set_tcp_gigabytes_per_sec(tcp->gigabytes_per_sec);
    row->set_tcp_batches_per_sec(tcp->batches_per_sec);
    row->set_tcp_client_cpu_seconds_per_gigabyte(tcp->cpu_seconds_per_gigabyte);
    row->set_ratio_vs_tcp(loader->gigabytes_per_sec / tcp->gigabytes_per_sec);
    row->set_grpc_only_ratio_vs_tcp(grpc_only->gigabytes_per_sec / tcp->gigabytes_per_sec);
    // The headline figures: batch 256, or the measured size nearest to it.
    if (report.summary_batch_size() == 0 ||
        std::abs(batch_size - 256) <
            std::abs(static_cast<int>(report.summary_batch_size()) - 256)) {
      report.set_summary_batch_size(static_cast<uint32_t>(batch_size));
      report.set_ratio_vs_tcp(row->ratio_vs_tcp());
      report.set_client_cpu_seconds_per_gigabyte(loader->cpu_seconds_per_gigabyte);
      report.set_grpc_only_ratio_vs_tcp(row->grpc_only_ratio_vs_tcp());
      report.set_grpc_only_client_cpu_seconds_per_gigabyte(grpc_only->cpu_seconds_per_gigabyte);
    }
  }
  server.first.Signal(SIGTERM);
  if (!server.first.WaitFor(absl::Seconds(10))) {
    server.first.Kill();
  }
  RETURN_IF_ERROR(failure);
  if (!options.json) {
    return FormatTable(report);
  }
  return ToJson(report);
}

}  // namespace heterodl
