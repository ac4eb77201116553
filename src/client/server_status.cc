#include "src/client/server_status.h"

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "heterodl/data_service.grpc.pb.h"
#include "src/client/server_channel.h"
#include "src/common/status_macros.h"
#include "src/wire/grpc_status.h"

namespace heterodl {

absl::StatusOr<ServerStatus> FetchServerStatus(const std::string& address, absl::Duration timeout,
                                               const std::string& auth_token,
                                               const TlsConfig& tls) {
  ASSIGN_OR_RETURN(const ServerChannels channels, ServerChannels::Create(tls));
  auto stub = v1::DataService::NewStub(channels.Open(address));
  grpc::ClientContext context;
  AddAuthToken(context, auth_token);
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::ServerStats stats;
  const grpc::Status status = stub->GetStats(&context, v1::StatsRequest(), &stats);
  if (!status.ok()) {
    const absl::Status failure = FromGrpcStatus(status);
    return absl::Status(failure.code(), absl::StrCat(address, ": ", failure.message()));
  }
  ServerStatus result;
  result.address = address;
  result.uptime_seconds = stats.uptime_seconds();
  result.images_per_second = stats.images_per_second();
  result.active_streams = stats.active_streams();
  result.pixel_channel_streams = stats.pixel_channel_streams();
  result.batches_sent = stats.batches_sent();
  result.samples_sent = stats.samples_sent();
  result.samples_failed = stats.samples_failed();
  result.worker_threads = stats.worker_threads();
  result.read_seconds = stats.read_seconds();
  result.batches_in_flight = stats.batches_in_flight();
  result.decode_seconds = stats.decode_seconds();
  result.augment_seconds = stats.augment_seconds();
  result.send_seconds = stats.send_seconds();
  result.peak_rss_bytes = stats.peak_rss_bytes();
  return result;
}

}  // namespace heterodl
