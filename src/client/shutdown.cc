#include "src/client/shutdown.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "heterodl/data_service.grpc.pb.h"
#include "src/client/server_channel.h"
#include "src/common/status_macros.h"
#include "src/rpc/grpc_status.h"

namespace heterodl {
namespace {

// Asks one server until it accepts, with backoff, or `give_up` passes; the
// last refusal otherwise.
absl::Status AskToShutDown(const std::string& address, const ServerChannels& channels,
                           const std::string& reason, const std::string& auth_token,
                           absl::Time give_up) {
  auto stub = v1::DataService::NewStub(channels.Open(address));
  v1::ShutdownRequest request;
  request.set_reason(reason);
  absl::Duration backoff = absl::Milliseconds(100);
  while (true) {
    grpc::ClientContext context;
    AddAuthToken(context, auth_token);
    context.set_deadline(absl::ToChronoTime(std::min(give_up, absl::Now() + absl::Seconds(2))));
    v1::ShutdownResponse response;
    const grpc::Status status = stub->Shutdown(&context, request, &response);
    if (status.ok() && response.accepted()) {
      return absl::OkStatus();
    }
    // Nothing listens there: the server has gone already (a signal reached
    // it too), and there is nothing left to stop.
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
        absl::StrContains(status.error_message(), "Connection refused")) {
      return absl::OkStatus();
    }
    if (absl::Now() + backoff >= give_up) {
      return FromGrpcStatus(status);
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
}

}  // namespace

absl::Status ShutdownDataServers(const std::vector<std::string>& servers, const std::string& reason,
                                 absl::Duration deadline, const std::string& auth_token,
                                 const TlsConfig& tls) {
  ASSIGN_OR_RETURN(const ServerChannels channels, ServerChannels::Create(tls));
  const absl::Time give_up = absl::Now() + deadline;
  std::vector<absl::Status> results(servers.size());
  std::vector<std::thread> senders;
  for (size_t i = 0; i < servers.size(); ++i) {
    senders.emplace_back(
        [&, i] { results[i] = AskToShutDown(servers[i], channels, reason, auth_token, give_up); });
  }
  for (std::thread& sender : senders) {
    sender.join();
  }
  std::vector<std::string> failed;
  for (size_t i = 0; i < servers.size(); ++i) {
    if (!results[i].ok()) {
      failed.push_back(absl::StrCat(servers[i], " (", results[i].message(), ")"));
    }
  }
  if (!failed.empty()) {
    return absl::UnavailableError(
        absl::StrCat("no shutdown acknowledgment from ", absl::StrJoin(failed, ", ")));
  }
  return absl::OkStatus();
}

}  // namespace heterodl
