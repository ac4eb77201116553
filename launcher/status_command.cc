// `heterodl status HOST:PORT... [--json]`: live statistics of data servers.
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "heterodl/metrics.pb.h"
#include "launcher/commands.h"
#include "launcher/flags.h"
#include "src/client/server_status.h"
#include "src/common/proto_json.h"

namespace heterodl {
namespace {

// One server's lines of the table: what it serves, then its numbers.
void PrintServer(const v1::ServerReport& report) {
  if (!report.error().empty()) {
    absl::PrintF("%s  unreachable: %s\n\n", report.address(), report.error());
    return;
  }
  const v1::ServerStats& stats = report.stats();
  absl::PrintF("%s  %s (%d samples)\n  pipeline %s\n", report.address(), stats.dataset(),
               stats.num_samples(), stats.default_pipeline());
  absl::PrintF(
      "  images/s %.1f now (last 10 s), %.1f since start %.0f s ago, %d threads\n"
      "  streams %d (%d with a pixel channel), %d batches in flight\n"
      "  sent %d batches, %d samples, %d replaced after a read or decode failure\n"
      "  seconds read %.2f, decode %.2f, augment %.2f, send %.2f; peak memory %d MiB\n\n",
      stats.recent_images_per_second(), stats.images_per_second(), stats.uptime_seconds(),
      stats.worker_threads(), stats.active_streams(), stats.pixel_channel_streams(),
      stats.batches_in_flight(), stats.batches_sent(), stats.samples_sent(),
      stats.samples_failed(), stats.read_seconds(), stats.decode_seconds(),
      stats.augment_seconds(), stats.send_seconds(), stats.peak_rss_bytes() >> 20);
}

}  // namespace

int RunStatusCommand(const std::vector<std::string>& arguments) {
  if (arguments.empty()) {
    std::fprintf(stderr, "usage: heterodl status HOST:PORT... [--json]\n");
    return kExitUsage;
  }
  absl::StatusOr<std::string> token = AuthTokenFromFlags();
  if (!token.ok()) {
    std::fprintf(stderr, "%s\n", std::string(token.status().message()).c_str());
    return kExitUsage;
  }
  int result = kExitOk;
  v1::StatusReport report;
  for (const std::string& address : arguments) {
    v1::ServerReport& server = *report.add_servers();
    server.set_address(address);
    absl::StatusOr<v1::ServerStats> stats =
        FetchServerStatus(address, absl::Seconds(5), *token, TlsFromFlags());
    if (stats.ok()) {
      *server.mutable_stats() = *std::move(stats);
    } else {
      server.set_error(std::string(stats.status().message()));
      result = kExitFailure;
    }
  }
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("%s\n", ToJson(report).c_str());
  } else {
    for (const v1::ServerReport& server : report.servers()) PrintServer(server);
  }
  return result;
}

}  // namespace heterodl
