#include "src/server/grpc_data_server.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "src/common/log.h"
#include "src/common/net/host_port.h"
#include "src/common/net/tcp_address.h"
#include "src/common/status_macros.h"
#include "src/rpc/credentials.h"

namespace heterodl {
namespace {

// The options' policy, its derived bounds filled in.
StreamPolicy StreamPolicyOf(const DataServerOptions& options) {
  StreamPolicy policy = options.streams;
  policy.max_unopened_calls = 4 * policy.max_streams;
  if (policy.max_streams_per_host <= 0) {
    policy.max_streams_per_host = std::max(1, policy.max_streams / 2);
  }
  return policy;
}

}  // namespace

GrpcDataServer::GrpcDataServer(const DataServerOptions& options,
                               std::unique_ptr<PixelChannelListener> pixel_listener,
                               std::unique_ptr<BatchService> service,
                               std::shared_ptr<std::atomic<bool>> cancel_reads)
    : options_(options),
      cancel_reads_(std::move(cancel_reads)),
      pixel_listener_(std::move(pixel_listener)),
      service_(std::move(service)),
      handlers_(*service_, activity_, pixel_listener_.get(), options.auth_token,
                StreamPolicyOf(options),
                [this](const std::string& reason) { RequestStop(reason); }) {}

absl::Status GrpcDataServer::Listen() {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   MakeServerCredentials(options_.tls));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.address, credentials, &port_);
  // gRPC sets SO_REUSEPORT by default: a second server on a busy port would
  // then start too, and the kernel would split new connections between the
  // two, handing loaders the other server's dataset.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(4 << 20);
  builder.SetMaxSendMessageSize(-1);
  builder.RegisterService(&handlers_);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    // gRPC says only that it failed; bind(2) says why.
    std::string why = "invalid address";
    if (absl::StatusOr<HostPort> where = SplitHostPort(options_.address); where.ok()) {
      const absl::Status probe = ProbeTcpBind(where->host, where->port);
      why = probe.ok() ? "gRPC refused it (see its log above)" : std::string(probe.message());
    }
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options_.address, ": ", why));
  }
  if (pixel_listener_ != nullptr) {
    pixel_listener_->SetServicePort(port_);
  }
  return absl::OkStatus();
}

void GrpcDataServer::RequestStop(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (stop_reason_.empty()) {
    stop_reason_ = reason;
  }
}

std::string GrpcDataServer::AwaitStopReason() {
  absl::MutexLock lock(&mu_);
  while (stop_reason_.empty()) {
    // Outside the lock: ending a call may run its reactions inline.
    mu_.Unlock();
    handlers_.Housekeep();
    mu_.Lock();
    std::string timeout = activity_.TimeoutReason(options_.idle_timeout, options_.startup_timeout);
    if (!timeout.empty()) {
      stop_reason_ = timeout;
      break;
    }
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](std::string* reason) { return !reason->empty(); }, &stop_reason_),
                         absl::Milliseconds(200));
  }
  return stop_reason_;
}

absl::Status GrpcDataServer::Wait() {
  const std::string reason = AwaitStopReason();
  LogInfo("stopping: %s", reason);
  // Open streams send the batches being built and end, handing back the
  // rest (their loaders ask the other servers); those still writing after a
  // short grace are cancelled. The worker pool drains when the service is
  // destroyed.
  handlers_.Leave(reason);
  server_->Shutdown(std::chrono::system_clock::now() +
                    absl::ToChronoMilliseconds(options_.drain_timeout));
  server_->Wait();
  if (cancel_reads_ != nullptr) {
    cancel_reads_->store(true);
  }
  v1::ServerStats stats = service_->Stats();
  const auto [streams, with_pixel_channel] = activity_.StreamsServed();
  LogInfo(
      "stopped: %d batches, %d samples (%d failed, %d decoded with warnings) served over %d "
      "streams (%d with a pixel channel), peak RSS %d MiB",
      stats.batches_sent(), stats.samples_sent(), stats.samples_failed(),
      stats.samples_decoded_with_warnings(), streams, with_pixel_channel,
      stats.peak_rss_bytes() >> 20);
  return absl::OkStatus();
}

}  // namespace heterodl
