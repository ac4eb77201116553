#include "src/server/data_server.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <deque>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "augment/pipeline.h"
#include "heterodl/data_service.grpc.pb.h"
#include "src/common/fingerprint.h"
#include "src/common/log.h"
#include "src/common/memory/shared_regions.h"
#include "src/common/net/auth_token.h"
#include "src/common/net/host_port.h"
#include "src/common/net/tcp_address.h"
#include "src/common/status_macros.h"
#include "src/rpc/credentials.h"
#include "src/rpc/grpc_status.h"
#include "src/server/activity_monitor.h"
#include "src/server/batch_service.h"
#include "src/server/pixel_channel_listener.h"
#include "src/wire/batch_codec.h"
#include "src/wire/leaving.h"

namespace heterodl {
namespace {

// Batches a stream may have requested and not yet received, whatever their
// size. Clients keep far fewer; the limit only stops a client from queueing
// unbounded work (max_stream_bytes bounds the memory).
constexpr int kMaxInFlightPerStream = 64;

class BatchStreamReactor;

// The streams open now, so that a server about to stop can tell each one.
class OpenStreams {
 public:
  // False once the server is leaving: the stream is to leave at once.
  bool Add(BatchStreamReactor* stream) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    streams_.insert(stream);
    return leave_reason_.empty();
  }
  // Empty while the server stays.
  std::string leave_reason() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return leave_reason_;
  }
  // From the stream's OnDone, before it may be deleted, with none of its
  // own locks held.
  void Remove(BatchStreamReactor* stream) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    streams_.erase(stream);
  }
  // Tells every open stream that the server is leaving (see
  // BatchStreamReactor::Leave); later streams are refused by the service.
  void LeaveAll(const std::string& reason) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  std::set<BatchStreamReactor*> streams_ ABSL_GUARDED_BY(mu_);
  std::string leave_reason_ ABSL_GUARDED_BY(mu_);
};

// One StreamBatches call. Reads requests, schedules builds on the service's
// pool, writes finished batches one at a time (gRPC allows one outstanding
// write), and deletes itself once gRPC is done with it and no build still
// refers to it. The method is raw (byte buffers): batches go out encoded by
// src/wire/batch_codec.h, pixels referenced rather than serialized. When the
// client opened a pixel channel (src/wire/pixel_channel.h), a batch's header
// goes on the stream and its pixels on the channel, queued in the same order
// under mu_; the batch counts as sent once the channel has written them.
//
// Every decision is made under mu_; every gRPC call (StartRead, StartWrite,
// Finish) is made after releasing it, because gRPC may run a reaction inline
// from such a call (for instance on an already-cancelled RPC) and reactions
// take mu_.
class BatchStreamReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // REQUIRES: activity.TryOpenStream() succeeded for this stream.
  // `pixel_listener` null: this server offers no pixel channel.
  BatchStreamReactor(grpc::CallbackServerContext& context, BatchService& service,
                     ActivityMonitor& activity, OpenStreams& open_streams,
                     uint64_t max_stream_bytes, PixelChannelListener* pixel_listener)
      : context_(context),
        service_(service),
        activity_(activity),
        open_streams_(open_streams),
        max_stream_bytes_(max_stream_bytes),
        pixel_listener_(pixel_listener) {
    if (!open_streams_.Add(this)) {
      absl::MutexLock lock(&mu_);
      leaving_ = true;
      leaving_reason_ = open_streams_.leave_reason();
    }
    StartRead(&request_wire_);
  }

  // Keeps the reactor alive for a Leave() to come. From OpenStreams, while
  // the stream is registered (so OnDone has not yet run past Remove).
  void Retain() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    ++references_;
  }

  // The server is leaving (a SIGTERM, a spot interruption notice, its
  // shutdown): batch ids asked from now on are not built, builds not yet
  // started are dropped, the batches being built are finished and sent, and
  // then the stream ends with UNAVAILABLE and kLeavingMetadataKey, so the
  // client asks the other servers for everything else at once. Releases the
  // reference Retain() took.
  void Leave(const std::string& reason) ABSL_LOCKS_EXCLUDED(mu_) {
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      if (!leaving_) {
        leaving_ = true;
        leaving_reason_ = reason;
        if (work_ != nullptr) {
          service_.CloseStream(*work_);
        }
      }
      // A stream not yet opened may still be in its constructor, before its
      // first read: it ends when its open request is handled.
      if (work_ != nullptr) {
        actions = AdvanceLocked();
      }
    }
    PerformAndRelease(actions);
  }

  ~BatchStreamReactor() override {
    absl::MutexLock lock(&mu_);
    activity_.BatchesRequested(-in_flight_);  // requested, never sent
  }

  void OnReadDone(bool ok) override {
    Actions actions;
    if (!ok) {
      absl::MutexLock lock(&mu_);
      reads_done_ = true;
      actions = AdvanceLocked();
    } else {
      const absl::Status status = HandleRequest();
      absl::MutexLock lock(&mu_);
      if (!status.ok()) {
        FinishLocked(status);
      } else if (!finish_requested_) {
        ++reads_starting_;
        actions.read = true;
      }
      actions.Merge(AdvanceLocked());
    }
    Perform(actions);
  }

  void OnWriteDone(bool ok) override {
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      writing_.reset();
      if (pixel_channel_ == nullptr) {  // else the batch is sent once its pixels are
        --in_flight_;
        activity_.BatchSent(absl::Now() - writing_ready_);
      }
      if (!ok) {
        FinishLocked(absl::CancelledError("client went away"));
      }
      actions = AdvanceLocked();
    }
    Perform(actions);
  }

  void OnCancel() override {
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      FinishLocked(absl::CancelledError("stream cancelled"));
      actions = AdvanceLocked();
    }
    Perform(actions);
  }

  void OnDone() override {
    open_streams_.Remove(this);
    activity_.StreamClosed();
    bool destroy;
    std::shared_ptr<PixelChannel> channel;
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
      // A call can end without OnCancel or a Finish of ours (the server
      // shutting down): builds still queued are of no use to anyone.
      if (work_ != nullptr) {
        service_.CloseStream(*work_);
      }
      destroy = UnreferencedLocked();
      channel = pixel_channel_;
      if (channel != nullptr) {
        activity_.PixelChannelStreams(-1);
      }
    }
    // Pixels still queued are dropped; their callbacks come from the
    // channel's thread, and the last one deletes this (unless `destroy`, this
    // may be gone already: only locals from here).
    if (channel != nullptr) {
      channel->Close();
    }
    if (destroy) {
      delete this;
    }
  }

 private:
  // gRPC calls decided under mu_, made after it is released.
  struct Actions {
    bool read = false;
    grpc::ByteBuffer* write = nullptr;
    std::optional<grpc::Status> finish;
    void Merge(const Actions& other) {
      read = read || other.read;
      if (other.write != nullptr) {
        write = other.write;
      }
      if (other.finish) {
        finish = other.finish;
      }
    }
  };

  // Makes the decided calls. The last statement is the one gRPC call that
  // may end the RPC (and, through OnDone, delete this): nothing touches the
  // reactor after it.
  void Perform(Actions actions) {
    if (actions.read) {
      StartRead(&request_wire_);
      absl::MutexLock lock(&mu_);
      --reads_starting_;
      // With a write pending, this can neither write nor finish.
      actions.Merge(AdvanceLocked());
    }
    if (actions.write != nullptr) {
      StartWrite(actions.write);
    } else if (actions.finish) {
      Finish(*actions.finish);
    }
  }

  // gRPC is done with the call and nothing else refers to it: the reaction
  // that sees this deletes the reactor.
  bool UnreferencedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return done_ && references_ == 0;
  }

  // How a build's or a send's callback ends, outside mu_: it makes the calls
  // it decided while still holding its reference, so that gRPC ending the
  // call meanwhile (OnDone, on another thread or inline) cannot delete the
  // reactor under it; then it lets go, deleting the reactor if it was last.
  void PerformAndRelease(Actions actions) ABSL_LOCKS_EXCLUDED(mu_) {
    Perform(std::move(actions));
    bool destroy;
    {
      absl::MutexLock lock(&mu_);
      --references_;
      destroy = UnreferencedLocked();
    }
    if (destroy) {
      delete this;
    }
  }

  absl::Status HandleRequest() {
    activity_.Touch();
    RETURN_IF_ERROR(ParseFromByteBuffer(request_wire_, &request_, "BatchRequest"));
    if (request_.has_open()) {
      if (stream_ != nullptr) {
        return absl::InvalidArgumentError("stream opened twice");
      }
      ASSIGN_OR_RETURN(stream_, service_.OpenStream(request_.open(), request_.client_id()));
      {
        absl::MutexLock lock(&mu_);
        // From here on, ending the stream ends its builds (FinishLocked).
        work_ = stream_;
        if (finish_requested_) {
          service_.CloseStream(*work_);
        }
      }
      std::shared_ptr<PixelChannel> channel;
      if (!request_.pixel_ticket().empty()) {
        ASSIGN_OR_RETURN(channel, ClaimPixelChannel(request_.pixel_ticket()));
        activity_.PixelChannelStreams(1);
      }
      const uint64_t batch_bytes =
          uint64_t{stream_->params.batch_size} * stream_->assembler->sample_bytes();
      absl::MutexLock lock(&mu_);
      pixel_channel_ = std::move(channel);
      max_in_flight_ = static_cast<int>(std::clamp<uint64_t>(
          max_stream_bytes_ / std::max<uint64_t>(batch_bytes, 1), 1, kMaxInFlightPerStream));
      return absl::OkStatus();
    }
    if (!request_.has_batch()) {
      return absl::InvalidArgumentError("empty request");
    }
    if (stream_ == nullptr) {
      return absl::InvalidArgumentError("the first request of a stream must be 'open'");
    }
    RETURN_IF_ERROR(service_.ValidateBatchId(*stream_, request_.batch()));
    {
      absl::MutexLock lock(&mu_);
      // Not built: the client gets it back when the stream ends.
      if (leaving_) {
        return absl::OkStatus();
      }
      if (in_flight_ >= max_in_flight_) {
        return absl::ResourceExhaustedError(
            absl::StrCat("more than ", max_in_flight_,
                         " batches requested and not yet received on one stream "
                         "(the server's per-stream memory limit)"));
      }
      ++in_flight_;
      ++pending_builds_;
      ++references_;  // released by the build's callback
    }
    activity_.BatchesRequested(1);
    service_.BuildAsync(stream_, request_.batch(), [this](absl::StatusOr<BuiltBatch> batch) {
      Actions actions;
      {
        absl::MutexLock lock(&mu_);
        --pending_builds_;
        if (!batch.ok()) {
          if (leaving_ && absl::IsCancelled(batch.status())) {
            --in_flight_;  // dropped as the server leaves: handed back
            activity_.BatchesRequested(-1);
          } else {
            FinishLocked(batch.status());
          }
        } else if (!finish_requested_) {
          QueueLocked(*std::move(batch));
        }
        actions = AdvanceLocked();
      }
      PerformAndRelease(actions);
    });
    return absl::OkStatus();
  }

  // UNAVAILABLE when this server has no pixel channels (the client then asks
  // again without; a restarted server may have turned them off).
  absl::StatusOr<std::shared_ptr<PixelChannel>> ClaimPixelChannel(const std::string& bytes) {
    if (pixel_listener_ == nullptr) {
      return absl::UnavailableError("this data server offers no pixel channel");
    }
    const std::optional<PixelTicket> ticket = PixelTicketFromBytes(bytes);
    if (!ticket) {
      return absl::InvalidArgumentError("pixel_ticket must be 16 bytes");
    }
    return pixel_listener_->Claim(*ticket);
  }

  // Queues a built batch for the stream, and its pixels for the channel if
  // there is one: both queues keep the order of this call.
  void QueueLocked(BuiltBatch batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time ready = absl::Now();
    if (pixel_channel_ == nullptr) {
      ready_.push_back({EncodeBatch(batch.header, std::move(batch.pixels)), ready});
      return;
    }
    batch.header.set_images_on_channel(batch.pixels.size);
    ready_.push_back({SerializeToByteBuffer(batch.header), ready});
    ++pending_sends_;
    ++references_;  // released by the send's callback
    pixel_channel_->Send(std::move(batch.pixels),
                         [this, ready](bool sent) { OnPixelsSent(sent, ready); });
  }

  // From the pixel channel's thread, once per queued batch.
  void OnPixelsSent(bool sent, absl::Time ready) {
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      --pending_sends_;
      --in_flight_;
      if (sent) {
        activity_.BatchSent(absl::Now() - ready);
      } else {
        activity_.BatchesRequested(-1);
        // The client's end went (it cancels the stream, too) or the network
        // broke (its stream fails over): not an error of this server's.
        if (!done_) {
          FinishLocked(absl::CancelledError("the pixel channel to the client closed"));
        }
      }
      actions = AdvanceLocked();
    }
    PerformAndRelease(actions);
  }

  // The next write or the end of the call, as the state allows.
  Actions AdvanceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Actions actions;
    if (done_ || finish_started_) {
      return actions;
    }
    if (!finish_requested_ && !writing_ && !ready_.empty()) {
      writing_ = std::move(ready_.front().first);
      writing_ready_ = ready_.front().second;
      ready_.pop_front();
      actions.write = &*writing_;
      return actions;
    }
    const bool nothing_owed =
        pending_builds_ == 0 && ready_.empty() && !writing_ && pending_sends_ == 0;
    if (!finish_requested_ && nothing_owed && (reads_done_ || leaving_)) {
      if (leaving_) {
        context_.AddTrailingMetadata(kLeavingMetadataKey, "1");
        FinishLocked(
            absl::UnavailableError(absl::StrCat("the data server is leaving: ", leaving_reason_)));
      } else {
        FinishLocked(absl::OkStatus());
      }
    }
    if (finish_requested_ && !writing_ && reads_starting_ == 0) {
      finish_started_ = true;
      actions.finish = finish_status_;
    }
    return actions;
  }

  void FinishLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finish_requested_) {
      return;
    }
    finish_requested_ = true;
    finish_status_ = ToGrpcStatus(status);
    // Builds not started are dropped; their callbacks come from the pool.
    if (work_ != nullptr) {
      service_.CloseStream(*work_);
    }
    if (!status.ok() && !absl::IsCancelled(status) && !leaving_) {
      LogWarning("batch stream ended with error: %s", status.ToString());
    }
  }

  grpc::CallbackServerContext& context_;
  BatchService& service_;
  ActivityMonitor& activity_;
  OpenStreams& open_streams_;
  const uint64_t max_stream_bytes_;
  PixelChannelListener* const pixel_listener_;
  // Only touched by OnReadDone's thread, between StartRead calls.
  grpc::ByteBuffer request_wire_;
  v1::BatchRequest request_;
  std::shared_ptr<const StreamPlan> stream_;

  absl::Mutex mu_;
  // Built batches waiting to be written, with when they were built.
  std::deque<std::pair<grpc::ByteBuffer, absl::Time>> ready_ ABSL_GUARDED_BY(mu_);
  std::optional<grpc::ByteBuffer> writing_ ABSL_GUARDED_BY(mu_);
  absl::Time writing_ready_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int max_in_flight_ ABSL_GUARDED_BY(mu_) = kMaxInFlightPerStream;
  int pending_builds_ ABSL_GUARDED_BY(mu_) = 0;
  // Callbacks yet to come that use this reactor (builds, pixel sends): it
  // lives until gRPC is done with the call and this is 0.
  int references_ ABSL_GUARDED_BY(mu_) = 0;
  // Batches whose pixels the channel has not yet written (or dropped).
  int pending_sends_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<PixelChannel> pixel_channel_ ABSL_GUARDED_BY(mu_);
  // The opened stream, for ending its builds from any reaction.
  std::shared_ptr<const StreamPlan> work_ ABSL_GUARDED_BY(mu_);
  int reads_starting_ ABSL_GUARDED_BY(mu_) = 0;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_started_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool leaving_ ABSL_GUARDED_BY(mu_) = false;
  std::string leaving_reason_ ABSL_GUARDED_BY(mu_);
  grpc::Status finish_status_ ABSL_GUARDED_BY(mu_);
};

void OpenStreams::LeaveAll(const std::string& reason) {
  std::vector<BatchStreamReactor*> streams;
  {
    absl::MutexLock lock(&mu_);
    if (!leave_reason_.empty()) {
      return;
    }
    leave_reason_ = reason;
    for (BatchStreamReactor* stream : streams_) {
      stream->Retain();
      streams.push_back(stream);
    }
  }
  // Outside mu_: a stream may end (and OnDone run) inside Leave().
  for (BatchStreamReactor* stream : streams) {
    stream->Leave(reason);
  }
}

// A stream refused before it starts (authentication): finishes at once.
class RejectedStream final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit RejectedStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

// The callback service with StreamBatches raw (byte buffers, see
// BatchStreamReactor).
using DataServiceBase = v1::DataService::WithCallbackMethod_GetDatasetInfo<
    v1::DataService::WithRawCallbackMethod_StreamBatches<
        v1::DataService::WithCallbackMethod_GetStats<
            v1::DataService::WithCallbackMethod_Shutdown<v1::DataService::Service>>>>;

class DataServiceImpl final : public DataServiceBase {
 public:
  // `auth_token` empty: no token required.
  // `pixel_listener` null: no pixel channels.
  DataServiceImpl(BatchService& service, ActivityMonitor& activity,
                  PixelChannelListener* pixel_listener, std::string auth_token, int max_streams,
                  uint64_t max_stream_bytes, std::function<void(const std::string&)> request_stop)
      : service_(service),
        pixel_listener_(pixel_listener),
        activity_(activity),
        auth_token_(std::move(auth_token)),
        max_streams_(max_streams),
        max_stream_bytes_(max_stream_bytes),
        request_stop_(std::move(request_stop)) {}

  grpc::ServerUnaryReactor* GetDatasetInfo(grpc::CallbackServerContext* context,
                                           const v1::DatasetInfoRequest* request,
                                           v1::DatasetInfo* info) override {
    grpc::Status status = Authorize(*context);
    if (status.ok()) {
      status = RefuseIfLeaving();
    }
    if (status.ok()) {
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
      info->set_max_stream_bytes(max_stream_bytes_);
    }
    return Finished(context, status);
  }

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StreamBatches(
      grpc::CallbackServerContext* context) override {
    grpc::Status status = Authorize(*context);
    if (status.ok()) {
      status = RefuseIfLeaving();
    }
    if (!status.ok()) {
      return new RejectedStream(status);
    }
    if (!activity_.TryOpenStream(max_streams_)) {
      return new RejectedStream(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("the server has its limit of ", max_streams_, " streams open")));
    }
    return new BatchStreamReactor(*context, service_, activity_, open_streams_, max_stream_bytes_,
                                  pixel_listener_);
  }

  // Every open stream sends what it has built and ends; new ones, and
  // loaders asking what this server serves, are refused from now on.
  void Leave(const std::string& reason) { open_streams_.LeaveAll(reason); }

  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* context, const v1::StatsRequest*,
                                     v1::ServerStats* stats) override {
    grpc::Status status = Authorize(*context);
    if (status.ok()) {
      *stats = service_.Stats();
      activity_.AddTo(*stats);
    }
    return Finished(context, status);
  }

  grpc::ServerUnaryReactor* Shutdown(grpc::CallbackServerContext* context,
                                     const v1::ShutdownRequest* request,
                                     v1::ShutdownResponse* response) override {
    grpc::Status status = Authorize(*context);
    if (status.ok()) {
      response->set_accepted(true);
      request_stop_(absl::StrCat("shutdown requested by ", context->peer(), ": ",
                                 request->reason().substr(0, 200)));
    }
    return Finished(context, status);
  }

 private:
  // UNAUTHENTICATED unless the call carries the server's token (when it has
  // one), compared in constant time.
  grpc::Status Authorize(const grpc::CallbackServerContext& context) const {
    if (auth_token_.empty()) {
      return grpc::Status::OK;
    }
    const auto& metadata = context.client_metadata();
    const auto it = metadata.find(kAuthTokenMetadataKey);
    if (it != metadata.end() &&
        TokensEqual(auth_token_, absl::string_view(it->second.data(), it->second.size()))) {
      return grpc::Status::OK;
    }
    LogWarning("refused a call from %s: missing or wrong auth token", context.peer());
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or wrong auth token");
  }

  grpc::Status RefuseIfLeaving() const {
    const std::string reason = open_streams_.leave_reason();
    if (reason.empty()) {
      return grpc::Status::OK;
    }
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat("the data server is leaving: ", reason));
  }

  static grpc::ServerUnaryReactor* Finished(grpc::CallbackServerContext* context,
                                            const grpc::Status& status) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(status);
    return reactor;
  }

  BatchService& service_;
  PixelChannelListener* const pixel_listener_;
  ActivityMonitor& activity_;
  const std::string auth_token_;
  const int max_streams_;
  const uint64_t max_stream_bytes_;
  std::function<void(const std::string&)> request_stop_;
  OpenStreams open_streams_;
};

class GrpcDataServer final : public DataServer {
 public:
  GrpcDataServer(const DataServerOptions& options,
                 std::unique_ptr<PixelChannelListener> pixel_listener,
                 std::unique_ptr<BatchService> service)
      : options_(options),
        pixel_listener_(std::move(pixel_listener)),
        service_(std::move(service)),
        impl_(*service_, activity_, pixel_listener_.get(), options.auth_token, options.max_streams,
              options.max_stream_bytes,
              [this](const std::string& reason) { RequestStop(reason); }) {}

  absl::Status Listen() {
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
    builder.RegisterService(&impl_);
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

  int port() const override { return port_; }

  void RequestStop(const std::string& reason) override {
    absl::MutexLock lock(&mu_);
    if (stop_reason_.empty()) {
      stop_reason_ = reason;
    }
  }

  absl::Status Wait() override {
    std::string reason;
    {
      absl::MutexLock lock(&mu_);
      while (stop_reason_.empty()) {
        std::string timeout =
            activity_.TimeoutReason(options_.idle_timeout, options_.startup_timeout);
        if (!timeout.empty()) {
          stop_reason_ = timeout;
          break;
        }
        mu_.AwaitWithTimeout(absl::Condition(
                                 +[](std::string* r) { return !r->empty(); }, &stop_reason_),
                             absl::Milliseconds(200));
      }
      reason = stop_reason_;
    }
    LogInfo("stopping: %s", reason);
    // Open streams send the batches being built and end, handing back the
    // rest (their loaders ask the other servers); those still writing after
    // a short grace are cancelled. The worker pool drains when the service
    // is destroyed.
    impl_.Leave(reason);
    server_->Shutdown(std::chrono::system_clock::now() +
                      absl::ToChronoMilliseconds(options_.drain_timeout));
    server_->Wait();
    v1::ServerStats stats = service_->Stats();
    const auto [streams, with_pixel_channel] = activity_.StreamsServed();
    LogInfo(
        "stopped: %d batches, %d samples (%d failed, %d decoded with warnings) served over %d "
        "streams (%d with a pixel "
        "channel), peak RSS %d MiB",
        stats.batches_sent(), stats.samples_sent(), stats.samples_failed(),
        stats.samples_decoded_with_warnings(), streams, with_pixel_channel,
        stats.peak_rss_bytes() >> 20);
    return absl::OkStatus();
  }

 private:
  const DataServerOptions options_;
  ActivityMonitor activity_;
  // Outlives the streams and the worker pool, which send on its channels.
  std::unique_ptr<PixelChannelListener> pixel_listener_;
  std::unique_ptr<BatchService> service_;
  DataServiceImpl impl_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  absl::Mutex mu_;
  std::string stop_reason_ ABSL_GUARDED_BY(mu_);
};

// The pixel channels: the port on the service's host, and the shared memory
// batches are built in for same-host loaders. Neither when turned off or
// under TLS (the channel is plaintext).
struct PixelChannels {
  std::unique_ptr<PixelChannelListener> listener;
  std::shared_ptr<SharedRegions> shared_regions;  // null: batches on the heap
};

absl::StatusOr<PixelChannels> ListenForPixelChannels(const DataServerOptions& options) {
  PixelChannels channels;
  if (options.pixel_port < 0) {
    return channels;
  }
  if (!options.tls.cert_file.empty()) {
    LogInfo("pixel channels off: TLS is on and they are plaintext; pixels go through gRPC");
    return channels;
  }
  // Batches live in shared memory only when a same-host loader can be told
  // where: through a pixel channel.
  if (options.same_host_pixels) {
    channels.shared_regions = SharedRegions::Create();
  }
  ASSIGN_OR_RETURN(const HostPort address, SplitHostPort(options.address));
  ASSIGN_OR_RETURN(channels.listener, PixelChannelListener::Listen(address.host, options.pixel_port,
                                                                   {}, channels.shared_regions));
  LogInfo(
      "pixel channels on port %d%s", channels.listener->port(),
      channels.listener->local_socket().empty() ? "" : ", same-host loaders through shared memory");
  return channels;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataServer>> DataServer::Start(const DataServerOptions& options) {
  RunPipelinesOnCallerThreadsOnly();
  absl::StatusOr<Dataset> opened =
      options.synthetic_samples > 0
          ? absl::StatusOr<Dataset>(Dataset::Synthetic(options.synthetic_samples, 1000))
          : Dataset::Open(options.dataset);
  RETURN_IF_ERROR(opened.status());
  Dataset dataset = std::move(*opened);
  if (const Dataset::MissingFiles missing = dataset.FindMissingFiles(); missing.count > 0) {
    const std::string what =
        absl::StrCat(missing.count, " of the ", dataset.size(), " files ", dataset.source(),
                     " lists do not exist: ", absl::StrJoin(missing.first, ", "),
                     missing.count > missing.first.size() ? ", ..." : "");
    if (options.strict_dataset) {
      return absl::FailedPreconditionError(absl::StrCat(what, " (--strict-dataset)"));
    }
    LogWarning("%s; their samples will be replaced (--strict-dataset refuses to serve)", what);
  }
  PipelineOptions pipeline_options;
  pipeline_options.max_pixels = options.max_pixels;
  pipeline_options.strict_decode = options.strict_decode;
  ASSIGN_OR_RETURN(
      Pipeline pipeline,
      Pipeline::Parse(options.pipeline.empty() ? std::string(kDefaultPipeline) : options.pipeline,
                      pipeline_options));
  const int threads = options.threads > 0
                          ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  LogInfo("dataset %s: %d samples, %d classes, fingerprint %s; pipeline %s; %d threads",
          dataset.source(), dataset.size(), dataset.class_names().size(),
          FingerprintToHex(dataset.fingerprint()), pipeline.CanonicalSpec(), threads);
  ASSIGN_OR_RETURN(PixelChannels pixel_channels, ListenForPixelChannels(options));
  auto service = std::make_unique<BatchService>(
      std::move(dataset), std::move(pipeline), threads, RequestLimits{}, pipeline_options,
      options.worker_nice,
      pixel_channels.shared_regions != nullptr ? pixel_channels.shared_regions->allocator()
                                               : HostAllocator{});
  auto server = std::make_unique<GrpcDataServer>(options, std::move(pixel_channels.listener),
                                                 std::move(service));
  RETURN_IF_ERROR(server->Listen());
  return server;
}

}  // namespace heterodl
