// `heterodl status HOST:PORT...`: live statistics of data servers.
#include <cstdio>

#include "absl/strings/str_format.h"
#include "launcher/commands.h"
#include "launcher/flags.h"
#include "src/client/server_status.h"

namespace heterodl {

int RunStatusCommand(const std::vector<std::string>& arguments) {
  if (arguments.empty()) {
    std::fprintf(stderr, "usage: heterodl status HOST:PORT...\n");
    return kExitUsage;
  }
  absl::StatusOr<std::string> token = AuthTokenFromFlags();
  if (!token.ok()) {
    std::fprintf(stderr, "%s\n", std::string(token.status().message()).c_str());
    return kExitUsage;
  }
  int result = kExitOk;
  absl::PrintF("%-22s %9s %7s %9s %9s %10s %10s %7s %8s %8s %8s %8s %8s\n", "server", "images/s",
               "streams", "pixel ch", "in flight", "batches", "samples", "failed", "read s",
               "decode s", "augment s", "send s", "peak MiB");
  for (const std::string& address : arguments) {
    absl::StatusOr<ServerStatus> status =
        FetchServerStatus(address, absl::Seconds(5), *token, TlsFromFlags());
    if (!status.ok()) {
      absl::PrintF("%-22s unreachable: %s\n", address, status.status().message());
      result = kExitFailure;
      continue;
    }
    absl::PrintF("%-22s %9.1f %7d %9d %9d %10d %10d %7d %8.2f %8.2f %8.2f %8.2f %8d\n", address,
                 status->images_per_second, status->active_streams, status->pixel_channel_streams,
                 status->batches_in_flight, status->batches_sent, status->samples_sent,
                 status->samples_failed, status->read_seconds, status->decode_seconds,
                 status->augment_seconds, status->send_seconds, status->peak_rss_bytes >> 20);
  }
  return result;
}

}  // namespace heterodl
