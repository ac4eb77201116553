#include "src/client/server_status.h"

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "heterodl/data_service.grpc.pb.h"
#include "src/client/endpoint_probe.h"
#include "src/client/server_channel.h"
#include "src/common/status_macros.h"
#include "src/rpc/grpc_status.h"

namespace heterodl {

absl::StatusOr<v1::ServerStats> FetchServerStatus(const std::string& address,
                                                  absl::Duration timeout,
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
    // gRPC's words for what answers and is no data server ("Failed parsing
    // HTTP/2" at a pixel port) say nothing to an operator: ask it.
    if (absl::IsUnavailable(failure) || absl::IsInternal(failure) || absl::IsUnknown(failure)) {
      if (const std::optional<std::string> why =
              ExplainWrongEndpoint(address, {.loader_uses_tls = tls.enabled()})) {
        return absl::InvalidArgumentError(absl::StrCat(address, ": ", *why));
      }
    }
    return absl::Status(failure.code(), absl::StrCat(address, ": ", failure.message()));
  }
  return stats;
}

double BuildCapacity(const v1::ServerStats& stats) {
  const double busy = stats.read_seconds() + stats.decode_seconds() + stats.augment_seconds();
  if (!(busy > 0) || stats.samples_sent() == 0) {
    return 0;
  }
  return stats.worker_threads() * static_cast<double>(stats.samples_sent()) / busy;
}

DataGroupCapacity MeasureDataGroup(const std::vector<v1::ServerStats>& servers) {
  DataGroupCapacity group;
  double total = 0;
  for (const v1::ServerStats& stats : servers) {
    if (const double capacity = BuildCapacity(stats); capacity > 0) {
      total += capacity;
      ++group.hosts;
    }
  }
  if (group.hosts > 0) {
    group.per_host = total / group.hosts;
  }
  return group;
}

}  // namespace heterodl
