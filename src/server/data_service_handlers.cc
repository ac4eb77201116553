#include "src/server/data_service_handlers.h"

#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "src/common/log.h"
#include "src/common/net/auth_token.h"
#include "src/rpc/grpc_status.h"

namespace heterodl {
namespace {

grpc::ServerUnaryReactor* Finished(grpc::CallbackServerContext* context,
                                   const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

}  // namespace

DataServiceHandlers::DataServiceHandlers(BatchService& service, ActivityMonitor& activity,
                                         PixelChannelListener* pixel_listener,
                                         std::string auth_token, StreamPolicy policy,
                                         std::function<void(const std::string&)> request_stop)
    : service_(service),
      activity_(activity),
      pixel_listener_(pixel_listener),
      auth_token_(std::move(auth_token)),
      policy_(policy),
      request_stop_(std::move(request_stop)) {}

grpc::ServerUnaryReactor* DataServiceHandlers::GetDatasetInfo(grpc::CallbackServerContext* context,
                                                              const v1::DatasetInfoRequest* request,
                                                              v1::DatasetInfo* info) {
  grpc::Status status = Authorize(*context);
  if (status.ok()) {
    status = RefuseIfLeaving();
  }
  if (!status.ok()) {
    return Finished(context, status);
  }
  activity_.Touch();
  absl::StatusOr<v1::DatasetInfo> described = service_.Info(request->pipeline());
  if (!described.ok()) {
    return Finished(context, ToGrpcStatus(described.status()));
  }
  *info = *std::move(described);
  if (pixel_listener_ != nullptr) {
    info->set_pixel_port(pixel_listener_->port());
    info->set_pixel_socket(pixel_listener_->local_socket());
  }
  info->set_max_stream_batches(kMaxInFlightPerStream);
  info->set_max_stream_bytes(policy_.max_stream_bytes);
  return Finished(context, grpc::Status::OK);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* DataServiceHandlers::StreamBatches(
    grpc::CallbackServerContext* context) {
  grpc::Status status = Authorize(*context);
  if (status.ok()) {
    status = RefuseIfLeaving();
  }
  if (!status.ok()) {
    return new RejectedStream(status);
  }
  // A slot is taken when the open request comes; until then (a few seconds
  // at most) the call waits among a bounded number: the oldest make room.
  int waiting = 0;
  if (!activity_.TryAcceptUnopenedCall(2 * policy_.max_unopened_calls, waiting)) {
    if (std::optional<std::string> line =
            refusals_.Refused(RefusalKind::kStreamLimit, context->peer(), absl::Now())) {
      LogWarning("%s", *line);
    }
    return new RejectedStream(
        grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                     absl::StrCat("the server has ", waiting,
                                  " stream calls waiting to send their open request")));
  }
  if (waiting > policy_.max_unopened_calls) {
    open_streams_.ExpireOldestUnopened(waiting - policy_.max_unopened_calls);
  }
  return new BatchStreamReactor(*context, service_, activity_, open_streams_, policy_, refusals_,
                                pixel_listener_);
}

void DataServiceHandlers::Housekeep() {
  // Batches may wait a moment for memory under a normal load; a second is a
  // sign that some of it is held by streams that do not read.
  constexpr absl::Duration kMemoryWaitBeforeEndingUnread = absl::Seconds(1);
  const absl::Time now = absl::Now();
  open_streams_.ExpireUnopened(now - policy_.open_timeout);
  const MemoryBudget::Stats memory = service_.MemoryStats();
  if (memory.waiting > 0 && memory.longest_wait >= kMemoryWaitBeforeEndingUnread) {
    open_streams_.EndLargestUnread(now - policy_.unread_timeout);
  }
}

grpc::ServerUnaryReactor* DataServiceHandlers::GetStats(grpc::CallbackServerContext* context,
                                                        const v1::StatsRequest* /*request*/,
                                                        v1::ServerStats* stats) {
  const grpc::Status status = Authorize(*context);
  if (status.ok()) {
    *stats = CurrentStats();
  }
  return Finished(context, status);
}

v1::ServerStats DataServiceHandlers::CurrentStats() {
  v1::ServerStats stats = service_.Stats();
  activity_.AddTo(stats);
  stats.set_calls_refused_unauthenticated(refusals_.count(RefusalKind::kUnauthenticated));
  stats.set_streams_refused_at_limit(refusals_.count(RefusalKind::kStreamLimit));
  stats.set_streams_refused_per_host(refusals_.count(RefusalKind::kHostStreamLimit));
  stats.set_streams_ended_unread(refusals_.count(RefusalKind::kUnreadStream));
  return stats;
}

grpc::ServerUnaryReactor* DataServiceHandlers::Shutdown(grpc::CallbackServerContext* context,
                                                        const v1::ShutdownRequest* request,
                                                        v1::ShutdownResponse* response) {
  const grpc::Status status = Authorize(*context);
  if (status.ok()) {
    response->set_accepted(true);
    request_stop_(absl::StrCat("shutdown requested by ", context->peer(), ": ",
                               request->reason().substr(0, 200)));
  }
  return Finished(context, status);
}

grpc::Status DataServiceHandlers::Authorize(const grpc::CallbackServerContext& context) {
  if (auth_token_.empty()) {
    return grpc::Status::OK;
  }
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find(kAuthTokenMetadataKey);
  if (it != metadata.end() &&
      TokensEqual(auth_token_, absl::string_view(it->second.data(), it->second.size()))) {
    return grpc::Status::OK;
  }
  if (std::optional<std::string> line =
          refusals_.Refused(RefusalKind::kUnauthenticated, context.peer(), absl::Now())) {
    LogWarning("%s", *line);
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or wrong auth token");
}

grpc::Status DataServiceHandlers::RefuseIfLeaving() const {
  const std::string reason = open_streams_.leave_reason();
  if (reason.empty()) {
    return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      absl::StrCat("the data server is leaving: ", reason));
}

}  // namespace heterodl
