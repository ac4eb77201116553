#include "src/client/remote_loader.h"

#include <grpcpp/grpcpp.h>

#include <map>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "heterodl/data_service.grpc.pb.h"
#include "src/common/auth_token.h"
#include "src/common/fingerprint.h"
#include "src/common/host_port.h"
#include "src/common/log.h"
#include "src/common/status_macros.h"
#include "src/data/epoch_plan.h"
#include "src/wire/batch_codec.h"
#include "src/wire/byte_stream.h"
#include "src/wire/credentials.h"
#include "src/wire/pixel_channel.h"

namespace heterodl {
namespace {

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

// A channel of its own (own subchannel, so its own TCP connection) for each
// `connection` number: gRPC would otherwise share one connection among
// channels to the same address.
std::shared_ptr<grpc::Channel> MakeChannel(
    const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    const TlsConfig& tls, int connection = 0) {
  grpc::ChannelArguments arguments;
  AddTlsChannelArguments(tls, arguments);
  arguments.SetMaxReceiveMessageSize(-1);
  arguments.SetMaxSendMessageSize(4 << 20);
  // Reconnect quickly to a server that comes back.
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  arguments.SetInt("heterodl.connection", connection);
  return grpc::CreateCustomChannel(address, credentials, arguments);
}

// Every call to a server carries the token when the servers require one.
void AddAuthToken(grpc::ClientContext& context, const std::string& token) {
  if (!token.empty()) context.AddMetadata(kAuthTokenMetadataKey, token);
}

constexpr char kStreamBatchesMethod[] = "/heterodl.v1.DataService/StreamBatches";

// What PumpStream returns when a read or write fails: the server (or the
// connection) ended the stream, and Finish() has the reason.
absl::Status StreamClosedByServer() { return absl::AbortedError("stream closed by the server"); }

// Errors that retrying elsewhere cannot fix: the client's plan is refused.
bool IsFatal(const absl::Status& status) {
  return absl::IsFailedPrecondition(status) || absl::IsInvalidArgument(status) ||
         absl::IsUnimplemented(status);
}

struct ServerEndpoint {
  ServerEndpoint(std::string address, const std::shared_ptr<grpc::Channel>& channel)
      : address(std::move(address)),
        stub(v1::DataService::NewStub(channel)),
        stream_stub(std::make_unique<grpc::GenericStub>(channel)) {}

  std::string address;
  std::unique_ptr<v1::DataService::Stub> stub;
  // StreamBatches as a raw call: batches are decoded by batch_codec.h.
  std::unique_ptr<grpc::GenericStub> stream_stub;
  // Set after this endpoint's pixel channel port could not be reached: its
  // streams carry pixels through gRPC until then, rather than each waiting
  // for a connection that a firewall drops. Only the endpoint's stream
  // thread (one at a time) touches it.
  absl::Time pixel_channel_retry_after = absl::InfinitePast();
};

// How long a stream waits for its pixel channel connection, and how long an
// endpoint goes without after that failed.
constexpr absl::Duration kPixelChannelConnectTimeout = absl::Seconds(5);
constexpr absl::Duration kPixelChannelRetryAfter = absl::Minutes(10);

// The fetch of one epoch: a thread per server pulling batch ids from a shared
// schedule, and the reorder buffer the trainer reads from.
class EpochFetch {
 public:
  EpochFetch(const RemoteLoaderOptions& options, std::vector<ServerEndpoint>& servers,
             BufferPool& pixels, v1::PlanConfig config, EpochPlan plan, int64_t start_batch)
      : options_(options),
        servers_(servers),
        pixels_(pixels),
        config_(std::move(config)),
        plan_(std::move(plan)),
        end_(plan_.batches_per_rank()),
        next_unassigned_(start_batch),
        next_to_deliver_(start_batch),
        window_(std::max<int64_t>(
            8, 2 * options.credits_per_server * static_cast<int64_t>(servers.size()))),
        last_receipt_(absl::Now()) {
    for (size_t i = 0; i < servers_.size(); ++i) {
      connections_.push_back(std::make_unique<Connection>());
    }
    for (size_t i = 0; i < servers_.size(); ++i) {
      threads_.emplace_back([this, i] { ServeLoop(i); });
    }
  }

  ~EpochFetch() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      for (auto& connection : connections_) CancelLocked(*connection);
    }
    for (std::thread& thread : threads_) thread.join();
  }

  int64_t next_to_deliver() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return next_to_deliver_;
  }

  absl::StatusOr<std::optional<Batch>> Next() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    // A stall is time spent waiting here with nothing arriving: however
    // long the trainer took since its last call does not count.
    const absl::Time waiting_since = absl::Now();
    while (true) {
      if (!error_.ok()) return error_;
      if (next_to_deliver_ >= end_) return std::optional<Batch>();
      auto it = completed_.find(next_to_deliver_);
      if (it != completed_.end()) {
        Batch batch = std::move(it->second);
        completed_.erase(it);
        ++next_to_deliver_;
        return std::optional<Batch>(std::move(batch));
      }
      CancelStalledLocked();
      if (absl::Now() - std::max(waiting_since, last_receipt_) > options_.stall_timeout) {
        std::vector<std::string> states;
        for (size_t i = 0; i < servers_.size(); ++i) {
          states.push_back(absl::StrCat(servers_[i].address, " (",
                                        connections_[i]->last_error.empty()
                                            ? "connected, not sending"
                                            : connections_[i]->last_error,
                                        ")"));
        }
        return absl::UnavailableError(absl::StrCat("no batch from any data server for ",
                                                   absl::FormatDuration(options_.stall_timeout),
                                                   ": ", absl::StrJoin(states, ", ")));
      }
      mu_.AwaitWithTimeout(absl::Condition(this, &EpochFetch::DeliverableLocked),
                           absl::Milliseconds(200));
    }
  }

 private:
  struct Connection {
    grpc::ClientContext* context = nullptr;       // of the open stream, if any
    PixelChannelReader* pixel_channel = nullptr;  // of the open stream, if it has one
    std::set<int64_t> outstanding;
    absl::Time last_progress = absl::Now();
    std::string last_error;
  };

  // Ends the connection's open stream, waking its thread wherever it blocks.
  void CancelLocked(Connection& connection) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (connection.context != nullptr) connection.context->TryCancel();
    if (connection.pixel_channel != nullptr) connection.pixel_channel->Interrupt();
  }

  bool DeliverableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !error_.ok() || next_to_deliver_ >= end_ || completed_.count(next_to_deliver_) > 0;
  }

  // A server sitting on requested batches for too long loses them.
  void CancelStalledLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time now = absl::Now();
    for (size_t i = 0; i < connections_.size(); ++i) {
      Connection& connection = *connections_[i];
      if (connection.context != nullptr && !connection.outstanding.empty() &&
          now - connection.last_progress > options_.stall_timeout / 2) {
        LogWarning("data server %s stalled for %s; giving its batches to others",
                   servers_[i].address, absl::FormatDuration(now - connection.last_progress));
        CancelLocked(connection);
        connection.last_progress = now;
      }
    }
  }

  // Next batch id to ask for, or nullopt when none may be asked for now.
  std::optional<int64_t> TakeWorkLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!reassigned_.empty()) {
      int64_t k = *reassigned_.begin();
      reassigned_.erase(reassigned_.begin());
      return k;
    }
    if (next_unassigned_ < end_ && next_unassigned_ < next_to_deliver_ + window_) {
      return next_unassigned_++;
    }
    return std::nullopt;
  }

  bool FinishedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !error_.ok() || next_to_deliver_ >= end_;
  }

  // Returns a failed stream's outstanding ids to the schedule.
  void ReleaseLocked(Connection& connection) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (int64_t k : connection.outstanding) {
      if (k >= next_to_deliver_ && completed_.count(k) == 0) reassigned_.insert(k);
    }
    connection.outstanding.clear();
  }

  // The bytes of pixels batch k carries, once its header matches the plan:
  // its sample indices, and a shape whose size cannot overflow.
  absl::StatusOr<uint64_t> PlannedPixelBytes(const v1::Batch& batch, int64_t k) const {
    const std::vector<int64_t> expected = plan_.BatchIndices(options_.rank, k);
    const size_t n = expected.size();
    constexpr uint32_t kMaxSide = 1 << 16;
    if (static_cast<size_t>(batch.labels_size()) != n ||
        static_cast<size_t>(batch.indices_size()) != n || batch.channels() != 3 ||
        batch.height() > kMaxSide || batch.width() > kMaxSide) {
      return absl::DataLossError(absl::StrCat("malformed batch ", k));
    }
    for (size_t i = 0; i < n; ++i) {
      if (batch.indices(static_cast<int>(i)) != expected[i]) {
        return absl::DataLossError(
            absl::StrCat("batch ", k,
                         " holds other samples than the epoch plan says: the server "
                         "computes a different plan"));
      }
    }
    return static_cast<uint64_t>(n) * batch.height() * batch.width() * batch.channels();
  }

  // One server's stream loop, reconnecting with backoff until the epoch is
  // delivered.
  void ServeLoop(size_t server) {
    absl::Duration backoff = absl::Milliseconds(200);
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        if (FinishedLocked()) return;
      }
      absl::Status status = RunStream(server);
      absl::MutexLock lock(&mu_);
      Connection& connection = *connections_[server];
      ReleaseLocked(connection);
      if (FinishedLocked()) return;
      if (status.ok()) continue;
      connection.last_error = status.ToString();
      if (IsFatal(status)) {
        error_ = absl::Status(status.code(), absl::StrCat("data server ", servers_[server].address,
                                                          ": ", status.message()));
        return;
      }
      LogWarning("data server %s: %s; retrying in %s", servers_[server].address, status.ToString(),
                 absl::FormatDuration(backoff));
      mu_.AwaitWithTimeout(absl::Condition(this, &EpochFetch::FinishedLocked), backoff);
      backoff = std::min(backoff * 2, absl::Seconds(5));
    }
  }

  // The stream's pixel channel, connected and its ticket presented; null
  // when the stream is to carry pixels itself (turned off, TLS, the server
  // offers none, or its port is unreachable: then with a warning).
  absl::StatusOr<std::unique_ptr<PixelChannelReader>> OpenPixelChannel(size_t server,
                                                                       const PixelTicket& ticket) {
    ServerEndpoint& endpoint = servers_[server];
    if (!options_.pixel_channel || options_.tls.enabled() ||
        absl::Now() < endpoint.pixel_channel_retry_after) {
      return nullptr;
    }
    const absl::StatusOr<HostPort> address = SplitHostPort(endpoint.address);
    if (!address.ok()) return nullptr;  // a gRPC target of another kind
    // Its port now: a restarted server may have another.
    grpc::ClientContext context;
    AddAuthToken(context, options_.auth_token);
    context.set_deadline(absl::ToChronoTime(absl::Now() + kPixelChannelConnectTimeout));
    {
      absl::MutexLock lock(&mu_);
      if (FinishedLocked()) return nullptr;
      connections_[server]->context = &context;
    }
    v1::DatasetInfo info;
    const grpc::Status asked = endpoint.stub->GetDatasetInfo(&context, {}, &info);
    {
      absl::MutexLock lock(&mu_);
      connections_[server]->context = nullptr;
    }
    if (!asked.ok()) return FromGrpc(asked);
    if (info.pixel_port() == 0) return nullptr;
    absl::StatusOr<std::unique_ptr<PixelChannelReader>> reader = PixelChannelReader::Connect(
        address->host, static_cast<int>(info.pixel_port()), ticket, kPixelChannelConnectTimeout);
    if (!reader.ok()) {
      LogWarning("data server %s: %s; its pixels go through gRPC for the next %s", endpoint.address,
                 reader.status().message(), absl::FormatDuration(kPixelChannelRetryAfter));
      endpoint.pixel_channel_retry_after = absl::Now() + kPixelChannelRetryAfter;
      return nullptr;
    }
    return reader;
  }

  absl::Status RunStream(size_t server) {
    // The channel first: the server pairs it with the stream by its ticket.
    const PixelTicket ticket = NewPixelTicket();
    ASSIGN_OR_RETURN(std::unique_ptr<PixelChannelReader> pixel_channel,
                     OpenPixelChannel(server, ticket));
    grpc::ClientContext context;
    AddAuthToken(context, options_.auth_token);
    Connection& connection = *connections_[server];
    {
      absl::MutexLock lock(&mu_);
      if (FinishedLocked()) return absl::OkStatus();
      connection.context = &context;
      connection.pixel_channel = pixel_channel.get();
      connection.last_progress = absl::Now();
    }
    auto stream =
        std::make_unique<ByteStream>(*servers_[server].stream_stub, &context, kStreamBatchesMethod);
    absl::Status result = PumpStream(server, *stream, pixel_channel == nullptr ? nullptr : &ticket,
                                     pixel_channel.get());
    bool clean_end;
    {
      absl::MutexLock lock(&mu_);
      connection.context = nullptr;
      connection.pixel_channel = nullptr;
      // Batches still owed to us would be left unread: cancel instead.
      clean_end = connection.outstanding.empty();
    }
    if (result.ok() && clean_end) {
      stream->WritesDone();
      // Finish() waits for the server to end the stream.
      return FromGrpc(stream->Finish());
    }
    if (absl::IsAborted(result)) {
      // The server ended the stream: its status says why (a refused plan is
      // fatal, a server going away is not), so read it before anything else.
      const absl::Status finish = FromGrpc(stream->Finish());
      return finish.ok() ? absl::UnavailableError("stream ended before the epoch did") : finish;
    }
    // Our own reason to stop (stall, bad batch, epoch delivered with batches
    // still owed): cancel, or Finish() would wait for them.
    context.TryCancel();
    stream->Finish();
    return result;
  }

  // Checks that `decoded` carries `planned_bytes` of pixels, reading them
  // from the stream's channel when its header says they come that way.
  absl::Status ReceivePixels(DecodedBatch& decoded, uint64_t planned_bytes,
                             PixelChannelReader* channel) {
    const int64_t k = decoded.header.id().index();
    const uint64_t size = decoded.header.images_on_channel();
    if (size == 0) {
      if (decoded.pixels.size() != planned_bytes) {
        return absl::DataLossError(absl::StrCat("malformed batch ", k));
      }
      return absl::OkStatus();
    }
    if (channel == nullptr || !decoded.pixels.empty()) {
      return absl::DataLossError(
          absl::StrCat("batch ", k, " announces pixels on a pixel channel this stream lacks"));
    }
    if (size != planned_bytes) {
      return absl::DataLossError(absl::StrCat("batch ", k, " announces ", size,
                                              " bytes of pixels; its shape makes ", planned_bytes));
    }
    ASSIGN_OR_RETURN(decoded.pixels, pixels_.Get(size));
    return channel->ReadExactly(decoded.pixels.data(), size);
  }

  // `ticket` and `channel`: the stream's pixel channel, or both null.
  absl::Status PumpStream(size_t server, ByteStream& stream, const PixelTicket* ticket,
                          PixelChannelReader* channel) {
    Connection& connection = *connections_[server];
    v1::BatchRequest open;
    *open.mutable_open() = config_;
    if (ticket != nullptr) open.set_pixel_ticket(PixelTicketBytes(*ticket));
    if (!stream.Write(SerializeToByteBuffer(open))) return StreamClosedByServer();
    grpc::ByteBuffer wire;
    while (true) {
      // Spend the free credits.
      std::vector<int64_t> to_request;
      {
        absl::MutexLock lock(&mu_);
        const auto has_work_or_done = [this, &connection]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return FinishedLocked() || !connection.outstanding.empty() || !reassigned_.empty() ||
                 (next_unassigned_ < end_ && next_unassigned_ < next_to_deliver_ + window_);
        };
        while (!has_work_or_done()) {
          mu_.AwaitWithTimeout(absl::Condition(&has_work_or_done), absl::Milliseconds(500));
        }
        if (FinishedLocked()) return absl::OkStatus();
        while (static_cast<int>(connection.outstanding.size()) < options_.credits_per_server) {
          std::optional<int64_t> k = TakeWorkLocked();
          if (!k) break;
          connection.outstanding.insert(*k);
          to_request.push_back(*k);
        }
      }
      for (int64_t k : to_request) {
        v1::BatchRequest request;
        request.mutable_batch()->set_epoch(plan_.epoch());
        request.mutable_batch()->set_rank(options_.rank);
        request.mutable_batch()->set_index(static_cast<uint32_t>(k));
        if (!stream.Write(SerializeToByteBuffer(request))) return StreamClosedByServer();
      }
      if (!stream.Read(&wire)) return StreamClosedByServer();
      ASSIGN_OR_RETURN(DecodedBatch decoded, DecodeBatch(wire, pixels_));
      wire.Clear();  // gRPC's receive buffers go back now
      const v1::Batch& batch = decoded.header;
      const int64_t k = batch.id().index();
      {
        absl::MutexLock lock(&mu_);
        if (batch.id().epoch() != plan_.epoch() || batch.id().rank() != options_.rank ||
            connection.outstanding.count(k) == 0) {
          return absl::DataLossError(absl::StrCat("unrequested batch ", k, " from server"));
        }
      }
      // Checked before a byte of pixels is read, so a bad header cannot make
      // the loader allocate or wait for what the plan does not hold.
      ASSIGN_OR_RETURN(const uint64_t pixel_bytes, PlannedPixelBytes(batch, k));
      RETURN_IF_ERROR(ReceivePixels(decoded, pixel_bytes, channel));
      absl::MutexLock lock(&mu_);
      connection.outstanding.erase(k);
      connection.last_progress = absl::Now();
      last_receipt_ = connection.last_progress;
      connection.last_error.clear();
      if (k >= next_to_deliver_ && completed_.count(k) == 0) {
        Batch& out = completed_[k];
        out.epoch = plan_.epoch();
        out.index = k;
        out.height = static_cast<int>(batch.height());
        out.width = static_cast<int>(batch.width());
        out.channels = static_cast<int>(batch.channels());
        out.images = std::move(decoded.pixels);
        out.labels.assign(batch.labels().begin(), batch.labels().end());
        out.indices.assign(batch.indices().begin(), batch.indices().end());
        out.failed = static_cast<int>(batch.failed());
      }
    }
  }

  const RemoteLoaderOptions& options_;
  std::vector<ServerEndpoint>& servers_;
  BufferPool& pixels_;
  const v1::PlanConfig config_;
  const EpochPlan plan_;
  const int64_t end_;

  mutable absl::Mutex mu_;
  int64_t next_unassigned_ ABSL_GUARDED_BY(mu_);
  int64_t next_to_deliver_ ABSL_GUARDED_BY(mu_);
  const int64_t window_;
  std::set<int64_t> reassigned_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Batch> completed_ ABSL_GUARDED_BY(mu_);
  absl::Time last_receipt_ ABSL_GUARDED_BY(mu_);  // of a batch from any server
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<Connection>> connections_;  // guarded by mu_ inside
  std::vector<std::thread> threads_;
};

class GrpcRemoteLoader final : public RemoteLoader {
 public:
  GrpcRemoteLoader(RemoteLoaderOptions options, std::vector<ServerEndpoint> servers,
                   DatasetDescription dataset)
      : options_(std::move(options)),
        servers_(std::move(servers)),
        dataset_(std::move(dataset)),
        // Room for the reorder window and the batches the trainer holds.
        pixels_(BufferPool::Create(
            static_cast<size_t>(2 * options_.credits_per_server * options_.connections_per_server *
                                    static_cast<int>(options_.servers.size()) +
                                8),
            options_.pixel_allocator)) {
    params_.num_samples = dataset_.num_samples;
    params_.seed = options_.seed;
    params_.world_size = options_.world_size;
    params_.batch_size = options_.batch_size;
    params_.drop_last = options_.drop_last;
    config_.set_dataset_fingerprint(dataset_.fingerprint);
    config_.set_seed(options_.seed);
    config_.set_world_size(options_.world_size);
    config_.set_batch_size(options_.batch_size);
    config_.set_drop_last(options_.drop_last);
    config_.set_pipeline(options_.pipeline);
  }

  ~GrpcRemoteLoader() override {
    fetch_.reset();
    stop_heartbeat_.Notify();
    if (heartbeat_.joinable()) heartbeat_.join();
  }

  void StartHeartbeat() {
    heartbeat_ = std::thread([this] {
      while (!stop_heartbeat_.WaitForNotificationWithTimeout(options_.heartbeat_interval)) {
        for (ServerEndpoint& server : servers_) {
          grpc::ClientContext context;
          AddAuthToken(context, options_.auth_token);
          context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
          v1::DatasetInfo info;
          // Failures do not matter here: the epoch's streams notice them.
          (void)server.stub->GetDatasetInfo(&context, v1::DatasetInfoRequest(), &info);
        }
      }
    });
  }

  absl::Status Validate() const { return BatchesPerRank(params_).status(); }

  const DatasetDescription& dataset() const override { return dataset_; }

  int64_t size() const override { return BatchesPerRank(params_).value_or(0); }

  absl::Status SetEpoch(uint32_t epoch, int64_t start_batch) override {
    if (start_batch < 0 || start_batch > size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("start batch ", start_batch, " outside [0, ", size(), "]"));
    }
    fetch_.reset();
    epoch_ = epoch;
    start_batch_ = start_batch;
    return absl::OkStatus();
  }

  absl::StatusOr<std::optional<Batch>> Next() override {
    if (fetch_ == nullptr) {
      ASSIGN_OR_RETURN(EpochPlan plan, EpochPlan::Create(params_, epoch_));
      fetch_ = std::make_unique<EpochFetch>(options_, servers_, *pixels_, config_, std::move(plan),
                                            start_batch_);
    }
    return fetch_->Next();
  }

  LoaderPosition position() const override {
    return {epoch_, fetch_ == nullptr ? start_batch_ : fetch_->next_to_deliver()};
  }

 private:
  const RemoteLoaderOptions options_;
  std::vector<ServerEndpoint> servers_;
  const DatasetDescription dataset_;
  const std::shared_ptr<BufferPool> pixels_;
  PlanParams params_;
  v1::PlanConfig config_;
  uint32_t epoch_ = 0;
  int64_t start_batch_ = 0;
  std::unique_ptr<EpochFetch> fetch_;
  absl::Notification stop_heartbeat_;
  std::thread heartbeat_;
};

// Waits for a server's DatasetInfo until `deadline`.
absl::StatusOr<v1::DatasetInfo> FetchDatasetInfo(v1::DataService::Stub& stub, absl::Time deadline,
                                                 const std::string& auth_token) {
  grpc::ClientContext context;
  AddAuthToken(context, auth_token);
  context.set_deadline(absl::ToChronoTime(deadline));
  context.set_wait_for_ready(true);
  v1::DatasetInfo info;
  grpc::Status status = stub.GetDatasetInfo(&context, v1::DatasetInfoRequest(), &info);
  if (!status.ok()) return FromGrpc(status);
  return info;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RemoteLoader>> RemoteLoader::Connect(
    const RemoteLoaderOptions& options) {
  if (options.servers.empty()) return absl::InvalidArgumentError("no data servers given");
  if (options.world_size == 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " outside world_size ", options.world_size));
  }
  if (options.credits_per_server < 1) {
    return absl::InvalidArgumentError("credits_per_server must be >= 1");
  }
  if (options.connections_per_server < 1 || options.connections_per_server > 16) {
    return absl::InvalidArgumentError("connections_per_server must be in [1, 16]");
  }
  ASSIGN_OR_RETURN(const std::shared_ptr<grpc::ChannelCredentials> credentials,
                   MakeChannelCredentials(options.tls));
  std::vector<ServerEndpoint> servers;
  for (const std::string& address : options.servers) {
    servers.emplace_back(address, MakeChannel(address, credentials, options.tls));
  }
  // Ask all servers at once; each waits for its server to come up.
  const absl::Time deadline = absl::Now() + options.connect_timeout;
  std::vector<absl::StatusOr<v1::DatasetInfo>> infos(servers.size(),
                                                     absl::UnknownError("not asked"));
  {
    std::vector<std::thread> askers;
    for (size_t i = 0; i < servers.size(); ++i) {
      askers.emplace_back(
          [&, i] { infos[i] = FetchDatasetInfo(*servers[i].stub, deadline, options.auth_token); });
    }
    for (std::thread& asker : askers) asker.join();
  }
  std::optional<size_t> first;
  std::vector<std::string> unreachable;
  for (size_t i = 0; i < servers.size(); ++i) {
    if (!infos[i].ok()) {
      unreachable.push_back(
          absl::StrCat(servers[i].address, " (", infos[i].status().message(), ")"));
      continue;
    }
    if (!first) {
      first = i;
    } else if (infos[i]->fingerprint() != infos[*first]->fingerprint()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data servers serve different datasets: ", servers[*first].address, " has '",
          infos[*first]->source(), "' (fingerprint ",
          FingerprintToHex(infos[*first]->fingerprint()), ") but ", servers[i].address, " has '",
          infos[i]->source(), "' (fingerprint ", FingerprintToHex(infos[i]->fingerprint()), ")"));
    }
  }
  if (!first) {
    return absl::UnavailableError(absl::StrCat("no data server answered within ",
                                               absl::FormatDuration(options.connect_timeout), ": ",
                                               absl::StrJoin(unreachable, ", ")));
  }
  if (!unreachable.empty()) {
    LogWarning("data servers not reachable yet, will retry: %s", absl::StrJoin(unreachable, ", "));
  }
  const v1::DatasetInfo& info = *infos[*first];
  DatasetDescription dataset;
  dataset.fingerprint = info.fingerprint();
  dataset.num_samples = info.num_samples();
  dataset.class_names.assign(info.class_names().begin(), info.class_names().end());
  dataset.height = static_cast<int>(info.height());
  dataset.width = static_cast<int>(info.width());
  // Further connections share their server's address (and its checks).
  const size_t addresses = servers.size();
  for (int connection = 1; connection < options.connections_per_server; ++connection) {
    for (size_t i = 0; i < addresses; ++i) {
      const std::string address = servers[i].address;  // the vector may grow
      servers.emplace_back(address, MakeChannel(address, credentials, options.tls, connection));
    }
  }
  auto loader = std::make_unique<GrpcRemoteLoader>(options, std::move(servers), std::move(dataset));
  RETURN_IF_ERROR(loader->Validate());
  loader->StartHeartbeat();
  return loader;
}

absl::Status ShutdownDataServers(const std::vector<std::string>& servers, const std::string& reason,
                                 absl::Duration deadline, const std::string& auth_token,
                                 const TlsConfig& tls) {
  ASSIGN_OR_RETURN(const std::shared_ptr<grpc::ChannelCredentials> credentials,
                   MakeChannelCredentials(tls));
  const absl::Time give_up = absl::Now() + deadline;
  std::vector<absl::Status> results(servers.size());
  std::vector<std::thread> senders;
  for (size_t i = 0; i < servers.size(); ++i) {
    senders.emplace_back([&, i] {
      auto stub = v1::DataService::NewStub(MakeChannel(servers[i], credentials, tls));
      absl::Duration backoff = absl::Milliseconds(100);
      while (true) {
        grpc::ClientContext context;
        AddAuthToken(context, auth_token);
        context.set_deadline(absl::ToChronoTime(std::min(give_up, absl::Now() + absl::Seconds(2))));
        v1::ShutdownRequest request;
        request.set_reason(reason);
        v1::ShutdownResponse response;
        grpc::Status status = stub->Shutdown(&context, request, &response);
        if (status.ok() && response.accepted()) {
          results[i] = absl::OkStatus();
          return;
        }
        results[i] = FromGrpc(status);
        if (absl::Now() + backoff >= give_up) return;
        absl::SleepFor(backoff);
        backoff = std::min(backoff * 2, absl::Seconds(1));
      }
    });
  }
  for (std::thread& sender : senders) sender.join();
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
