// `heterodl status HOST:PORT...`: live statistics of data servers.
#include <cstdio>

#include "absl/strings/str_format.h"
#include "launcher/commands.h"
#include "src/client/server_status.h"

namespace heterodl {

int RunStatusCommand(const std::vector<std::string>& arguments) {
  if (arguments.empty()) {
    std::fprintf(stderr, "usage: heterodl status HOST:PORT...\n");
    return kExitUsage;
  }
  int result = kExitOk;
  absl::PrintF("%-22s %9s %8s %10s %10s %8s %9s %9s %9s\n", "server", "images/s", "clients",
               "batches", "samples", "failed", "read s", "decode s", "peak MiB");
  for (const std::string& address : arguments) {
    absl::StatusOr<ServerStatus> status = FetchServerStatus(address, absl::Seconds(5));
    if (!status.ok()) {
      absl::PrintF("%-22s unreachable: %s\n", address, status.status().message());
      result = kExitFailure;
      continue;
    }
    absl::PrintF("%-22s %9.1f %8d %10d %10d %8d %9.2f %9.2f %9d\n", address,
                 status->images_per_second, status->active_streams, status->batches_sent,
                 status->samples_sent, status->samples_failed, status->read_seconds,
                 status->decode_augment_seconds, status->peak_rss_bytes >> 20);
  }
  return result;
}

}  // namespace heterodl
