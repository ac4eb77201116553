#include "src/client/remote_loader.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "heterodl/data_service.grpc.pb.h"
#include "src/client/batch_check.h"
#include "src/client/endpoint_probe.h"
#include "src/client/feed_schedule.h"
#include "src/client/pixel_channel_reader.h"
#include "src/client/server_channel.h"
#include "src/client/server_discovery.h"
#include "src/common/fingerprint.h"
#include "src/common/log.h"
#include "src/common/net/host_port.h"
#include "src/common/status_macros.h"
#include "src/data/epoch_plan.h"
#include "src/rpc/byte_stream.h"
#include "src/rpc/grpc_status.h"
#include "src/wire/batch_codec.h"
#include "src/wire/leaving.h"
#include "src/wire/plan_config.h"

namespace heterodl {
namespace {

constexpr char kStreamBatchesMethod[] = "/heterodl.v1.DataService/StreamBatches";

// What ReadBatches returns when a read fails: the server (or the
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
  // The same for the server's shared memory, after a same-host channel broke
  // its protocol (a region this process could not map, say): its pixels
  // come over TCP until then, rather than failing every stream the same way.
  absl::Time same_host_retry_after = absl::InfinitePast();
};

// How long a stream waits for its pixel channel connection, and how long an
// endpoint goes without after that failed.
constexpr absl::Duration kPixelChannelConnectTimeout = absl::Seconds(5);
// Connect(): how long one attempt to reach a server may take (a refused
// connection fails at once), the pause between attempts, and how often a
// wait asks the caller whether it was interrupted.
constexpr absl::Duration kConnectAttempt = absl::Seconds(2);
constexpr absl::Duration kConnectRetryPause = absl::Milliseconds(250);
// Connect(): how long the other servers get to answer once one has.
constexpr absl::Duration kStragglerGrace = absl::Seconds(2);
constexpr absl::Duration kInterruptPoll = absl::Milliseconds(200);
constexpr absl::Duration kPixelChannelRetryAfter = absl::Minutes(10);
// How often a server that serves another dataset is asked again (it may be
// replaced by one that serves ours).
constexpr absl::Duration kIncompatibleRetry = absl::Seconds(30);

// The loader's window, in batches, whatever the memory budget says.
constexpr int kMinWindow = 2;
constexpr int kMaxWindow = 256;
// Epoch plans kept for checking batches (the window spans a few epochs at
// most unless epochs are tiny, and then so are the plans).
constexpr size_t kPlansKept = 64;

// What a stream learnt of its server as it opened.
struct StreamLimits {
  uint32_t max_batches = 64;
  uint64_t max_bytes = 0;  // 0: no byte limit told
};

// A connection's open stream, as other threads see it.
struct LiveStream {
  grpc::ClientContext* context = nullptr;       // of the open call, if any
  ByteStream* stream = nullptr;                 // once its open request is sent
  PixelChannelReader* pixel_channel = nullptr;  // of the open stream, if it has one
  StreamLimits limits;
  // Its server serves another dataset: not used, asked again now and then.
  bool incompatible = false;
  // Its server ended the last stream because it is leaving.
  bool left = false;
};

// What the loader last said about a server (all its connections together):
// a failure is logged when it first happens or changes, and once a minute
// while it lasts, not at every retry.
struct ServerHealth {
  std::string last_error;  // empty: delivering
  absl::Time last_logged = absl::InfinitePast();
  // When it said it was leaving: failing to reach it after that is expected,
  // and said only once it has lasted a minute.
  absl::Time left_at = absl::InfinitePast();
};

// connections_per_server endpoints per address: the first connection to
// every server, then the second to every server, and so on.
std::vector<std::unique_ptr<ServerEndpoint>> MakeEndpoints(const ServerChannels& channels,
                                                           const std::vector<std::string>& servers,
                                                           int connections_per_server) {
  std::vector<std::unique_ptr<ServerEndpoint>> endpoints;
  for (int connection = 0; connection < connections_per_server; ++connection) {
    for (const std::string& address : servers) {
      endpoints.push_back(
          std::make_unique<ServerEndpoint>(address, channels.Open(address, connection)));
    }
  }
  return endpoints;
}

class GrpcRemoteLoader final : public RemoteLoader {
 public:
  // `discovery` null: the servers are fixed.
  GrpcRemoteLoader(RemoteLoaderOptions options, ServerChannels channels,
                   std::vector<std::unique_ptr<ServerEndpoint>> endpoints,
                   std::unique_ptr<ServerDiscovery> discovery, DatasetDescription dataset,
                   PlanParams params, int64_t samples_per_rank, int64_t batches_per_epoch,
                   uint64_t batch_bytes_estimate)
      : options_(std::move(options)),
        channels_(std::move(channels)),
        discovery_(std::move(discovery)),
        dataset_(std::move(dataset)),
        params_(params),
        samples_per_rank_(samples_per_rank),
        batches_per_epoch_(batches_per_epoch),
        config_(ToPlanConfig(params, dataset_.fingerprint, options_.pipeline)),
        // Keeps what the window and the trainer's batches ever held.
        pixels_(BufferPool::Create(kMaxWindow + 8, options_.pixel_allocator)),
        schedule_(batches_per_epoch, static_cast<int>(endpoints.size()), FeedOptionsFor(options_)),
        endpoints_(std::move(endpoints)),
        streams_(endpoints_.size()) {
    absl::MutexLock lock(&mu_);
    LearnBatchBytesLocked(batch_bytes_estimate);
  }

  ~GrpcRemoteLoader() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      for (size_t c = 0; c < streams_.size(); ++c) {
        CancelLocked(c);
      }
    }
    // No connection is added once discovery has stopped.
    if (discovery_thread_.joinable()) {
      discovery_thread_.join();
    }
    std::vector<std::thread> threads;
    {
      absl::MutexLock lock(&mu_);
      threads.swap(threads_);
    }
    for (std::thread& thread : threads) {
      thread.join();
    }
  }

  void Start() {
    absl::MutexLock lock(&mu_);
    for (size_t c = 0; c < endpoints_.size(); ++c) {
      StartConnectionLocked(c);
    }
    if (discovery_ != nullptr) {
      discovery_thread_ = std::thread([this] { DiscoveryLoop(); });
    }
  }

  const DatasetDescription& dataset() const override { return dataset_; }

  int64_t size() const override { return batches_per_epoch_; }

  int64_t samples_per_rank() const override { return samples_per_rank_; }

  using RemoteLoader::SetEpoch;
  absl::Status SetEpoch(uint32_t epoch, int64_t start_batch) override {
    if (start_batch < 0 || start_batch > size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("start batch ", start_batch, " outside [0, ", size(), "]"));
    }
    if (epoch > kMaxEpoch) {
      return absl::InvalidArgumentError(absl::StrCat("epoch ", epoch, " over ", kMaxEpoch));
    }
    absl::MutexLock lock(&mu_);
    started_ = true;
    schedule_.Reposition(epoch, start_batch);
    DispatchAllLocked();
    return absl::OkStatus();
  }

  absl::StatusOr<std::optional<Batch>> Next() override {
    absl::MutexLock lock(&mu_);
    if (!started_) {
      // Next() without SetEpoch(): epoch 0 from its start.
      started_ = true;
      schedule_.Reposition(0, 0);
      DispatchAllLocked();
    }
    // A stall is time spent waiting here with nothing arriving: however
    // long the trainer took since its last call does not count.
    const absl::Time waiting_since = absl::Now();
    while (true) {
      if (!error_.ok()) {
        return error_;
      }
      if (schedule_.AtEndOfEpoch()) {
        return std::optional<Batch>();
      }
      if (std::optional<Batch> batch = schedule_.TakeNext()) {
        DispatchAllLocked();  // the window moved on
        samples_failed_ += batch->failed;
        samples_decoded_with_warnings_ += batch->decoded_with_warnings;
        return batch;
      }
      const absl::Time now = absl::Now();
      CancelStalledLocked(now);
      if (now - std::max(waiting_since, last_receipt_) > options_.stall_timeout) {
        return StallErrorLocked();
      }
      mu_.AwaitWithTimeout(absl::Condition(this, &GrpcRemoteLoader::DeliverableLocked),
                           kInterruptPoll);
      if (options_.interrupt_next && !DeliverableLocked()) {
        mu_.Unlock();  // the callback may take a while (Python's GIL)
        const bool interrupted = options_.interrupt_next();
        mu_.Lock();
        if (interrupted) {
          return absl::CancelledError("interrupted while waiting for a batch");
        }
      }
    }
  }

  LoaderPosition position() const override {
    absl::MutexLock lock(&mu_);
    const BatchKey key = schedule_.position();
    return {key.epoch, key.index};
  }

  LoaderStats stats() const override {
    absl::MutexLock lock(&mu_);
    const FeedStats& feed = schedule_.stats();
    LoaderStats stats;
    stats.requested = feed.requested;
    stats.received = feed.received;
    stats.delivered = feed.delivered;
    stats.dropped = feed.dropped;
    stats.reassigned = feed.reassigned;
    stats.stalled = stalled_;
    stats.samples_failed = samples_failed_;
    stats.samples_decoded_with_warnings = samples_decoded_with_warnings_;
    stats.window = schedule_.window();
    for (size_t c = 0; c < streams_.size(); ++c) {
      if (schedule_.retired(static_cast<int>(c))) {
        continue;
      }
      stats.depths.push_back(schedule_.depth(static_cast<int>(c)));
      if (streams_[c].pixel_channel != nullptr && streams_[c].pixel_channel->local()) {
        ++stats.same_host_streams;
      }
    }
    stats.servers = ServersLocked();
    return stats;
  }

 private:
  static FeedOptions FeedOptionsFor(const RemoteLoaderOptions& options) {
    FeedOptions feed;
    feed.across_epochs = options.prefetch_across_epochs;
    return feed;
  }

  bool DeliverableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !error_.ok() || schedule_.AtEndOfEpoch() || schedule_.NextReady();
  }

  // The window and the connections' ceilings follow the batch size in
  // bytes: first estimated from the servers' default pipeline, then learnt.
  void LearnBatchBytesLocked(uint64_t batch_bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    batch_bytes = std::max<uint64_t>(batch_bytes, 1);
    if (batch_bytes == batch_bytes_) {
      return;
    }
    batch_bytes_ = batch_bytes;
    schedule_.SetWindow(static_cast<int>(
        std::clamp<uint64_t>(options_.max_buffered_bytes / batch_bytes_, kMinWindow, kMaxWindow)));
    for (size_t c = 0; c < streams_.size(); ++c) {
      ApplyLimitsLocked(c);
    }
  }

  // Half of what the server lets one stream have outstanding: it counts a
  // batch until its write completes there, which can be after it arrived
  // here and a new request left, so a loader at its limit would be refused.
  void ApplyLimitsLocked(size_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const StreamLimits& limits = streams_[c].limits;
    uint64_t depth = limits.max_batches;
    if (limits.max_bytes > 0) {
      depth = std::min<uint64_t>(depth, limits.max_bytes / batch_bytes_);
    }
    schedule_.SetMaxDepth(static_cast<int>(c),
                          static_cast<int>(std::min<uint64_t>(depth / 2, 1 << 16)));
  }

  // Asks connection `c`'s server for what the schedule gives it now.
  void DispatchLocked(size_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ByteStream* stream = streams_[c].stream;
    if (stream == nullptr) {
      return;
    }
    for (const BatchKey& key : schedule_.TakeRequests(static_cast<int>(c), absl::Now())) {
      v1::BatchRequest request;
      request.mutable_batch()->set_epoch(key.epoch);
      request.mutable_batch()->set_rank(options_.rank);
      request.mutable_batch()->set_index(static_cast<uint32_t>(key.index));
      // A broken stream refuses; its reader sees the break and gives the
      // key back (Lost).
      (void)stream->Send(SerializeToByteBuffer(request));
    }
  }

  void DispatchAllLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (size_t c = 0; c < streams_.size(); ++c) {
      DispatchLocked(c);
    }
  }

  // The servers in use (not retired), each once, sorted.
  std::vector<std::string> ServersLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::set<std::string> servers;
    for (size_t c = 0; c < endpoints_.size(); ++c) {
      if (!schedule_.retired(static_cast<int>(c))) {
        servers.insert(endpoints_[c]->address);
      }
    }
    return {servers.begin(), servers.end()};
  }

  void StartConnectionLocked(size_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ServerEndpoint* endpoint = endpoints_[c].get();
    threads_.emplace_back([this, c, endpoint] { StreamLoop(c, *endpoint); });
  }

  // Re-reads the servers' sources every discovery_interval and follows them.
  void DiscoveryLoop() {
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        mu_.AwaitWithTimeout(absl::Condition(
                                 +[](bool* stopping) { return *stopping; }, &stopping_),
                             options_.discovery_interval);
        if (stopping_) {
          return;
        }
      }
      // Outside the lock: a DNS lookup can take seconds.
      const std::vector<std::string> servers = discovery_->Refresh();
      absl::MutexLock lock(&mu_);
      if (stopping_) {
        return;
      }
      FollowServersLocked(servers);
    }
  }

  // Retires the connections of servers no longer listed and opens
  // connections to servers newly listed.
  void FollowServersLocked(const std::vector<std::string>& servers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::set<std::string> listed(servers.begin(), servers.end());
    const std::vector<std::string> in_use = ServersLocked();
    std::set<std::string> unlisted;
    for (size_t c = 0; c < endpoints_.size(); ++c) {
      const int connection = static_cast<int>(c);
      if (schedule_.retired(connection) || listed.count(endpoints_[c]->address) > 0) {
        continue;
      }
      unlisted.insert(endpoints_[c]->address);
      schedule_.Retire(connection);
      CancelLocked(c);
    }
    for (const std::string& address : unlisted) {
      LogInfo("data server %s is no longer listed; its batches go to the others", address);
    }
    for (const std::string& address : servers) {
      if (std::binary_search(in_use.begin(), in_use.end(), address)) {
        continue;
      }
      LogInfo("data server %s listed; checking its dataset, then sending it batches", address);
      for (std::unique_ptr<ServerEndpoint>& endpoint :
           MakeEndpoints(channels_, {address}, options_.connections_per_server)) {
        endpoints_.push_back(std::move(endpoint));
        streams_.emplace_back();
        const int c = schedule_.AddConnection();
        ApplyLimitsLocked(static_cast<size_t>(c));
        StartConnectionLocked(static_cast<size_t>(c));
      }
    }
    DispatchAllLocked();
  }

  // Ends connection `c`'s open call, waking its thread wherever it blocks.
  void CancelLocked(size_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (streams_[c].context != nullptr) {
      streams_[c].context->TryCancel();
    }
    if (streams_[c].pixel_channel != nullptr) {
      streams_[c].pixel_channel->Interrupt();
    }
  }

  // A server sitting on requested batches for too long loses them.
  void CancelStalledLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const int c : schedule_.Stalled(now, options_.stall_timeout / 2)) {
      LogWarning("data server %s stalled for %s; giving its batches to others",
                 endpoints_[c]->address, absl::FormatDuration(options_.stall_timeout / 2));
      CancelLocked(static_cast<size_t>(c));
      schedule_.ResetStallClock(c, now);
      ++stalled_;
    }
  }

  absl::Status StallErrorLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<std::string> states;
    for (const std::string& address : ServersLocked()) {
      const auto it = health_.find(address);
      const bool failing = it != health_.end() && !it->second.last_error.empty();
      states.push_back(absl::StrCat(
          address, " (", failing ? it->second.last_error : "connected, not sending", ")"));
    }
    if (states.empty()) {
      states.push_back("none is listed now");
    }
    return absl::DeadlineExceededError(absl::StrCat("no batch from any data server for ",
                                                    absl::FormatDuration(options_.stall_timeout),
                                                    ": ", absl::StrJoin(states, ", ")));
  }

  // One connection's life: its stream, reopened with backoff, until the
  // loader goes, its server is no longer listed, or a server refuses the
  // plan.
  void StreamLoop(size_t c, ServerEndpoint& endpoint) {
    const int connection = static_cast<int>(c);
    absl::Duration backoff = absl::Milliseconds(200);
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        if (stopping_ || !error_.ok() || schedule_.retired(connection)) {
          return;
        }
      }
      bool delivered = false;
      absl::Status status = RunStream(c, endpoint, delivered);
      absl::MutexLock lock(&mu_);
      schedule_.Lost(connection);
      DispatchAllLocked();  // what it owed goes to the others
      if (stopping_ || schedule_.retired(connection)) {
        return;
      }
      if (status.ok()) {
        status = absl::UnavailableError("the server ended the stream");
      }
      if (delivered) {
        backoff = absl::Milliseconds(200);
      }
      if (streams_[c].incompatible) {
        // That server's fault, not the plan's: the others go on.
        backoff = kIncompatibleRetry;
      } else if (IsFatal(status)) {
        error_ = absl::Status(
            status.code(), absl::StrCat("data server ", endpoint.address, ": ", status.message()));
        return;
      }
      LogRetryLocked(c, status);
      mu_.AwaitWithTimeout(absl::Condition(
                               +[](bool* stopping) { return *stopping; }, &stopping_),
                           backoff);
      backoff = std::clamp(backoff * 2, absl::Milliseconds(200), absl::Seconds(5));
    }
  }

  // Says why a server's streams are retried: each new reason, and a
  // still-failing server once a minute, not every retry of every connection.
  // A server that said it was leaving is said to leave, once.
  void LogRetryLocked(size_t c, const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string& address = endpoints_[c]->address;
    ServerHealth& health = health_[address];
    const std::string reason = status.ToString();
    const absl::Time now = absl::Now();
    if (streams_[c].left) {
      streams_[c].left = false;
      if (now - health.left_at > absl::Seconds(1)) {
        LogInfo("data server %s is leaving (%s); its batches go to the others", address,
                status.message());
        health.left_at = now;
        health.last_logged = now;
      }
    } else if (now - health.left_at < absl::Minutes(1)) {
      // Gone as it said: not a failure yet.
    } else if (reason != health.last_error || now - health.last_logged > absl::Minutes(1)) {
      LogWarning(
          "data server %s: %s; retrying (every %s at most) while others take its batches", address,
          reason,
          absl::FormatDuration(streams_[c].incompatible ? kIncompatibleRetry : absl::Seconds(5)));
      health.last_logged = now;
    }
    health.last_error = reason;
  }

  // A batch arrived from connection c: a server that was failing is back.
  void MarkDeliveringLocked(size_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const auto it = health_.find(endpoints_[c]->address);
    if (it == health_.end()) {
      return;
    }
    it->second.left_at = absl::InfinitePast();
    if (it->second.last_error.empty()) {
      return;
    }
    LogInfo("data server %s: delivering again", endpoints_[c]->address);
    it->second.last_error.clear();
  }

  // The server's limits for a stream, and the stream's pixel channel,
  // connected and its ticket presented (null when the stream is to carry
  // pixels itself: turned off, TLS, the server offers none, or its port is
  // unreachable, then with a warning).
  absl::StatusOr<std::unique_ptr<PixelChannelReader>> PrepareStream(size_t c,
                                                                    ServerEndpoint& endpoint,
                                                                    const PixelTicket& ticket) {
    // Its limits and pixel port now: a restarted server may differ.
    grpc::ClientContext context;
    AddAuthToken(context, options_.auth_token);
    context.set_deadline(absl::ToChronoTime(absl::Now() + kPixelChannelConnectTimeout));
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) {
        return absl::CancelledError("the loader is closing");
      }
      if (schedule_.retired(static_cast<int>(c))) {
        return absl::CancelledError("no longer listed");
      }
      streams_[c].context = &context;
    }
    v1::DatasetInfo info;
    const grpc::Status asked = endpoint.stub->GetDatasetInfo(&context, {}, &info);
    // A server that joined mid-run, or one restarted on other files.
    const bool incompatible = asked.ok() && info.fingerprint() != dataset_.fingerprint;
    {
      absl::MutexLock lock(&mu_);
      streams_[c].context = nullptr;
      if (asked.ok() && info.max_stream_batches() > 0) {
        streams_[c].limits = {info.max_stream_batches(), info.max_stream_bytes()};
        ApplyLimitsLocked(c);
      }
      streams_[c].incompatible = incompatible;
    }
    if (!asked.ok()) {
      return FromGrpcStatus(asked);
    }
    if (incompatible) {
      return absl::FailedPreconditionError(absl::StrCat(
          "serves '", info.source(), "' (fingerprint ", FingerprintToHex(info.fingerprint()),
          "), not this job's dataset (fingerprint ", FingerprintToHex(dataset_.fingerprint),
          "); not using it"));
    }
    if (!options_.pixel_channel || options_.tls.enabled()) {
      return nullptr;
    }
    if (options_.same_host_pixels && !info.pixel_socket().empty() &&
        absl::Now() >= endpoint.same_host_retry_after) {
      // Refused at once unless the server is on this host: then over TCP.
      absl::StatusOr<std::unique_ptr<PixelChannelReader>> local = PixelChannelReader::ConnectLocal(
          info.pixel_socket(), ticket, kPixelChannelConnectTimeout);
      if (local.ok()) {
        return local;
      }
    }
    if (absl::Now() < endpoint.pixel_channel_retry_after || info.pixel_port() == 0) {
      return nullptr;
    }
    const absl::StatusOr<HostPort> address = SplitHostPort(endpoint.address);
    if (!address.ok()) {
      return nullptr;  // a gRPC target of another kind
    }
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

  // One stream, open until it breaks or the loader goes. `delivered`: set
  // once a batch came through it.
  absl::Status RunStream(size_t c, ServerEndpoint& endpoint, bool& delivered) {
    // The channel first: the server pairs it with the stream by its ticket.
    const PixelTicket ticket = NewPixelTicket();
    ASSIGN_OR_RETURN(std::unique_ptr<PixelChannelReader> pixel_channel,
                     PrepareStream(c, endpoint, ticket));
    grpc::ClientContext context;
    AddAuthToken(context, options_.auth_token);
    ByteStream stream(*endpoint.stream_stub, &context, kStreamBatchesMethod);
    v1::BatchRequest open;
    *open.mutable_open() = config_;
    open.set_client_id(client_id_);
    if (pixel_channel != nullptr) {
      open.set_pixel_ticket(PixelTicketBytes(ticket));
    }
    stream.Send(SerializeToByteBuffer(open));
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) {
        return absl::CancelledError("the loader is closing");
      }
      if (schedule_.retired(static_cast<int>(c))) {
        return absl::CancelledError("no longer listed");
      }
      streams_[c].context = &context;
      streams_[c].stream = &stream;
      streams_[c].pixel_channel = pixel_channel.get();
      DispatchLocked(c);
    }
    absl::Status result = ReadBatches(c, stream, pixel_channel.get(), delivered);
    {
      absl::MutexLock lock(&mu_);
      streams_[c].context = nullptr;
      streams_[c].stream = nullptr;
      streams_[c].pixel_channel = nullptr;
    }
    if (absl::IsDataLoss(result) && pixel_channel != nullptr && pixel_channel->local()) {
      LogWarning("data server %s: %s; its pixels come over TCP for the next %s", endpoint.address,
                 result.message(), absl::FormatDuration(kPixelChannelRetryAfter));
      endpoint.same_host_retry_after = absl::Now() + kPixelChannelRetryAfter;
    }
    if (absl::IsAborted(result)) {
      // The server ended the stream: its status says why (a refused plan is
      // fatal, a server going away is not), so read it before anything else.
      const grpc::Status ended = stream.Finish();
      const auto& trailers = context.GetServerTrailingMetadata();
      if (trailers.find(kLeavingMetadataKey) != trailers.end()) {
        absl::MutexLock lock(&mu_);
        streams_[c].left = true;
      }
      return FromGrpcStatus(ended);
    }
    // Our own reason to stop (a bad batch, the loader closing): cancel, or
    // Finish() would wait for the server.
    context.TryCancel();
    stream.Finish();
    return result;
  }

  // Reads batches off the stream (and their pixels off its channel) until
  // it ends: ABORTED when the server or the network ended it.
  absl::Status ReadBatches(size_t c, ByteStream& stream, PixelChannelReader* channel,
                           bool& delivered) {
    grpc::ByteBuffer wire;
    while (true) {
      if (!stream.Read(&wire)) {
        return StreamClosedByServer();
      }
      ASSIGN_OR_RETURN(DecodedBatch decoded, DecodeBatch(wire, *pixels_, options_.max_batch_bytes));
      wire.Clear();  // gRPC's receive buffers go back now
      const v1::Batch& header = decoded.header;
      const BatchKey key{header.id().epoch(), header.id().index()};
      {
        absl::MutexLock lock(&mu_);
        if (header.id().rank() != options_.rank || !schedule_.Expects(static_cast<int>(c), key)) {
          return absl::DataLossError(absl::StrCat("unrequested batch ", key.index, " of epoch ",
                                                  key.epoch, " from the server"));
        }
      }
      // Checked before a byte of pixels is read, so a bad header cannot make
      // the loader allocate or wait for what the plan does not hold.
      ASSIGN_OR_RETURN(std::shared_ptr<const EpochPlan> plan, PlanFor(key.epoch));
      ASSIGN_OR_RETURN(const uint64_t pixel_bytes,
                       CheckBatchHeader(header, *plan, options_.rank, options_.max_batch_bytes));
      RETURN_IF_ERROR(ReceivePixels(decoded, pixel_bytes, channel));
      const absl::Time now = absl::Now();
      absl::MutexLock lock(&mu_);
      if (header.labels_size() > 0) {
        LearnBatchBytesLocked(pixel_bytes / header.labels_size() * options_.batch_size);
      }
      schedule_.Receive(static_cast<int>(c), key, ToBatch(std::move(decoded)), TimingOf(header),
                        now);
      last_receipt_ = now;
      MarkDeliveringLocked(c);
      delivered = true;
      DispatchLocked(c);
    }
  }

  static Batch ToBatch(DecodedBatch decoded) {
    const v1::Batch& header = decoded.header;
    Batch batch;
    batch.epoch = header.id().epoch();
    batch.index = header.id().index();
    batch.height = static_cast<int>(header.height());
    batch.width = static_cast<int>(header.width());
    batch.channels = static_cast<int>(header.channels());
    batch.images = std::move(decoded.pixels);
    batch.labels.assign(header.labels().begin(), header.labels().end());
    batch.indices.assign(header.indices().begin(), header.indices().end());
    batch.failed = static_cast<int>(header.failed());
    batch.decoded_with_warnings = static_cast<int>(header.decoded_with_warnings());
    return batch;
  }

  // Checks that `decoded` carries `planned_bytes` of pixels, reading them
  // from the stream's channel when its header says they come that way.
  absl::Status ReceivePixels(DecodedBatch& decoded, uint64_t planned_bytes,
                             PixelChannelReader* channel) {
    const int64_t k = decoded.header.id().index();
    if (decoded.header.images_on_channel() == 0) {
      if (decoded.pixels.size() != planned_bytes) {
        return absl::DataLossError(absl::StrCat("batch ", k, " carries ", decoded.pixels.size(),
                                                " bytes of pixels; its shape makes ",
                                                planned_bytes));
      }
      return absl::OkStatus();
    }
    if (channel == nullptr || !decoded.pixels.empty()) {
      return absl::DataLossError(
          absl::StrCat("batch ", k, " announces pixels on a pixel channel this stream lacks"));
    }
    ASSIGN_OR_RETURN(decoded.pixels, pixels_->Get(planned_bytes));
    return channel->ReadExactly(decoded.pixels.data(), planned_bytes);
  }

  // The plan of `epoch`, built once and kept while the window may need it.
  absl::StatusOr<std::shared_ptr<const EpochPlan>> PlanFor(uint32_t epoch) {
    {
      absl::MutexLock lock(&mu_);
      auto it = plans_.find(epoch);
      if (it != plans_.end()) {
        return it->second;
      }
    }
    // Outside the lock: a permutation of a large dataset takes a while.
    ASSIGN_OR_RETURN(EpochPlan plan, EpochPlan::Create(params_, epoch));
    auto shared = std::make_shared<const EpochPlan>(std::move(plan));
    absl::MutexLock lock(&mu_);
    plans_.emplace(epoch, shared);
    const uint32_t trainer_epoch = schedule_.position().epoch;
    while (!plans_.empty() &&
           (plans_.begin()->first < trainer_epoch || plans_.size() > kPlansKept)) {
      plans_.erase(plans_.begin());
    }
    return shared;
  }

  const RemoteLoaderOptions options_;
  const ServerChannels channels_;
  // Only the discovery thread uses it.
  const std::unique_ptr<ServerDiscovery> discovery_;
  const DatasetDescription dataset_;
  const PlanParams params_;
  const int64_t samples_per_rank_;
  const int64_t batches_per_epoch_;
  const v1::PlanConfig config_;
  // Shared by all its streams: a server builds one loader's batches in the
  // order asked, whichever connection asked.
  const std::string client_id_ = PixelTicketBytes(NewPixelTicket());
  const std::shared_ptr<BufferPool> pixels_;

  mutable absl::Mutex mu_;
  FeedSchedule schedule_ ABSL_GUARDED_BY(mu_);
  // One per connection, connections_per_server per server, numbered as the
  // schedule numbers them; never erased (a server no longer listed has its
  // connections retired), so a stream thread's endpoint stays put.
  std::vector<std::unique_ptr<ServerEndpoint>> endpoints_ ABSL_GUARDED_BY(mu_);
  std::vector<LiveStream> streams_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, ServerHealth> health_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, std::shared_ptr<const EpochPlan>> plans_ ABSL_GUARDED_BY(mu_);
  uint64_t batch_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t stalled_ ABSL_GUARDED_BY(mu_) = 0;
  // Over the batches delivered.
  int64_t samples_failed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t samples_decoded_with_warnings_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_receipt_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);  // one per connection
  std::thread discovery_thread_;
};

// Asks a server for its DatasetInfo until it answers, `deadline` passes or
// `abandon` is set: short attempts one after another (a refused connection
// fails one at once), so why a server does not answer is known, and said once
// per new reason, within seconds instead of at the deadline. UNAVAILABLE
// with the last reason; errors no retry can fix (a wrong token, a pipeline
// the server cannot parse) at once.
absl::StatusOr<v1::DatasetInfo> AwaitDatasetInfo(ServerEndpoint& server, absl::Time deadline,
                                                 const RemoteLoaderOptions& options,
                                                 const std::atomic<bool>& abandon,
                                                 const std::atomic<bool>& enough) {
  absl::Status last = absl::DeadlineExceededError("no answer");
  while (!abandon.load() && !enough.load()) {
    grpc::ClientContext context;
    AddAuthToken(context, options.auth_token);
    context.set_deadline(absl::ToChronoTime(std::min(deadline, absl::Now() + kConnectAttempt)));
    v1::DatasetInfoRequest request;
    request.set_pipeline(options.pipeline);
    v1::DatasetInfo info;
    const grpc::Status answer = server.stub->GetDatasetInfo(&context, request, &info);
    if (answer.ok()) {
      return info;
    }
    const absl::Status error = FromGrpcStatus(answer);
    if (!absl::IsUnavailable(error) && !absl::IsDeadlineExceeded(error)) {
      return error;
    }
    if (absl::IsUnavailable(error) && error.message() != last.message()) {
      // Something that answers and is no data server will not become one.
      EndpointProbeOptions probe;
      probe.loader_uses_tls = options.tls.enabled();
      if (std::optional<std::string> wrong = ExplainWrongEndpoint(server.address, probe)) {
        return absl::InvalidArgumentError(*wrong);
      }
      LogWarning("data server %s: %s; waiting up to %s for it", server.address, error.message(),
                 absl::FormatDuration(options.connect_timeout));
    }
    if (absl::IsUnavailable(error) || !absl::IsUnavailable(last)) {
      last = error;
    }
    if (absl::Now() >= deadline) {
      break;
    }
    absl::SleepFor(kConnectRetryPause);
  }
  if (abandon.load()) {
    return absl::CancelledError("interrupted");
  }
  return absl::UnavailableError(last.message());
}

ServerSources SourcesOf(const RemoteLoaderOptions& options) {
  return {options.servers, options.servers_file, options.servers_dns};
}

absl::Status ValidateOptions(const RemoteLoaderOptions& options) {
  if (options.world_size == 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " outside world_size ", options.world_size));
  }
  if (options.connections_per_server < 1 || options.connections_per_server > 16) {
    return absl::InvalidArgumentError("connections_per_server must be in [1, 16]");
  }
  if (options.max_buffered_bytes == 0 || options.max_batch_bytes == 0) {
    return absl::InvalidArgumentError("max_buffered_bytes and max_batch_bytes must be > 0");
  }
  if (options.discovery_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("discovery_interval must be > 0");
  }
  // A malformed address is a mistake to report now, not a server to wait for.
  return ValidateServerSources(SourcesOf(options));
}

// The servers listed when the loader starts. With a servers file or a DNS
// name that list none yet (the data group is still starting), waits up to
// connect_timeout for one: UNAVAILABLE naming the sources after that,
// CANCELLED when options.interrupt_connect says so.
absl::StatusOr<std::vector<std::string>> FirstServers(ServerDiscovery& discovery,
                                                      const RemoteLoaderOptions& options) {
  const absl::Time deadline = absl::Now() + options.connect_timeout;
  bool said = false;
  while (true) {
    std::vector<std::string> servers = discovery.Refresh();
    if (!servers.empty()) {
      return servers;
    }
    if (!said) {
      LogInfo("no data server listed yet (servers file '%s', DNS name '%s'); waiting up to %s",
              options.servers_file, options.servers_dns,
              absl::FormatDuration(options.connect_timeout));
      said = true;
    }
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          "no data server listed within ", absl::FormatDuration(options.connect_timeout),
          " (servers file '", options.servers_file, "', DNS name '", options.servers_dns, "')"));
    }
    if (options.interrupt_connect && options.interrupt_connect()) {
      return absl::CancelledError("interrupted while waiting for data servers");
    }
    absl::SleepFor(kConnectRetryPause);
  }
}

// How many askers have their answer.
struct AnswerCount {
  explicit AnswerCount(size_t expected) : expected(expected) {}
  bool AllAnswered() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return answered == expected; }

  const size_t expected;
  absl::Mutex mu;
  size_t answered ABSL_GUARDED_BY(mu) = 0;
  absl::Time first_answer ABSL_GUARDED_BY(mu) = absl::InfiniteFuture();  // a good one
};

// Each of the first `count` endpoints' DatasetInfo (one per server), asked at
// once; CANCELLED as soon as options.interrupt_connect says so.
absl::StatusOr<std::vector<absl::StatusOr<v1::DatasetInfo>>> AskServers(
    std::vector<std::unique_ptr<ServerEndpoint>>& servers, size_t count,
    const RemoteLoaderOptions& options) {
  const absl::Time deadline = absl::Now() + options.connect_timeout;
  std::vector<absl::StatusOr<v1::DatasetInfo>> infos(count, absl::UnknownError("not asked"));
  std::atomic<bool> abandon{false};
  std::atomic<bool> enough{false};
  AnswerCount answers(count);
  std::vector<std::thread> askers;
  for (size_t i = 0; i < count; ++i) {
    askers.emplace_back([&, i] {
      absl::StatusOr<v1::DatasetInfo> info =
          AwaitDatasetInfo(*servers[i], deadline, options, abandon, enough);
      absl::MutexLock lock(&answers.mu);
      if (info.ok() && answers.first_answer == absl::InfiniteFuture()) {
        answers.first_answer = absl::Now();
      }
      infos[i] = std::move(info);
      ++answers.answered;
    });
  }
  bool interrupted = false;
  {
    absl::MutexLock lock(&answers.mu);
    while (!answers.AllAnswered()) {
      answers.mu.AwaitWithTimeout(absl::Condition(&answers, &AnswerCount::AllAnswered),
                                  kInterruptPoll);
      // One server is enough to start with; the others get a short grace
      // (a cluster starts its servers together) and are otherwise used once
      // they answer: a DNS name may list a pod that is already gone.
      if (absl::Now() - answers.first_answer > kStragglerGrace) {
        break;
      }
      if (answers.AllAnswered() || !options.interrupt_connect) {
        continue;
      }
      answers.mu.Unlock();  // the callback may take a while (Python's GIL)
      interrupted = options.interrupt_connect();
      answers.mu.Lock();
      if (interrupted) {
        break;
      }
    }
  }
  abandon.store(interrupted);
  enough.store(true);
  for (std::thread& asker : askers) {
    asker.join();
  }
  if (interrupted) {
    return absl::CancelledError("interrupted while waiting for data servers");
  }
  return infos;
}

// The first answer, once every answer names the same dataset. Fails naming
// the servers when none answered, or both sides of a mismatch; warns about
// those that did not answer yet (they are used once they come up).
absl::StatusOr<v1::DatasetInfo> AgreedDataset(
    const std::vector<std::unique_ptr<ServerEndpoint>>& servers,
    const std::vector<absl::StatusOr<v1::DatasetInfo>>& infos, absl::Duration waited) {
  std::optional<size_t> first;
  std::vector<std::string> unreachable;
  for (size_t i = 0; i < infos.size(); ++i) {
    const absl::Status& refused = infos[i].status();
    if (!refused.ok() && !absl::IsUnavailable(refused) && !absl::IsDeadlineExceeded(refused)) {
      // No retry changes this answer (a wrong token, a bad pipeline).
      return absl::Status(refused.code(), absl::StrCat("data server ", servers[i]->address, ": ",
                                                       refused.message()));
    }
    if (!infos[i].ok()) {
      unreachable.push_back(
          absl::StrCat(servers[i]->address, " (", infos[i].status().message(), ")"));
      continue;
    }
    if (!first) {
      first = i;
    } else if (infos[i]->fingerprint() != infos[*first]->fingerprint()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data servers serve different datasets: ", servers[*first]->address, " has '",
          infos[*first]->source(), "' (fingerprint ",
          FingerprintToHex(infos[*first]->fingerprint()), ") but ", servers[i]->address, " has '",
          infos[i]->source(), "' (fingerprint ", FingerprintToHex(infos[i]->fingerprint()), ")"));
    }
  }
  if (!first) {
    return absl::UnavailableError(absl::StrCat("no data server answered within ",
                                               absl::FormatDuration(waited), ": ",
                                               absl::StrJoin(unreachable, ", ")));
  }
  if (!unreachable.empty()) {
    LogWarning("data servers not reachable yet, will retry: %s", absl::StrJoin(unreachable, ", "));
  }
  return *infos[*first];
}

DatasetDescription Describe(const v1::DatasetInfo& info) {
  DatasetDescription dataset;
  dataset.fingerprint = info.fingerprint();
  dataset.num_samples = info.num_samples();
  dataset.class_names.assign(info.class_names().begin(), info.class_names().end());
  dataset.height = static_cast<int>(info.height());
  dataset.width = static_cast<int>(info.width());
  return dataset;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RemoteLoader>> RemoteLoader::Connect(
    const RemoteLoaderOptions& options) {
  RETURN_IF_ERROR(ValidateOptions(options));
  auto discovery = std::make_unique<ServerDiscovery>(SourcesOf(options));
  ASSIGN_OR_RETURN(const std::vector<std::string> servers, FirstServers(*discovery, options));
  // A batch with its header, on the gRPC path.
  ASSIGN_OR_RETURN(ServerChannels channels,
                   ServerChannels::Create(options.tls, options.max_batch_bytes + (16 << 20)));
  std::vector<std::unique_ptr<ServerEndpoint>> endpoints =
      MakeEndpoints(channels, servers, options.connections_per_server);
  // Each server's first connection answers for it.
  ASSIGN_OR_RETURN(const std::vector<absl::StatusOr<v1::DatasetInfo>> infos,
                   AskServers(endpoints, servers.size(), options));
  ASSIGN_OR_RETURN(const v1::DatasetInfo info,
                   AgreedDataset(endpoints, infos, options.connect_timeout));
  PlanParams params;
  params.num_samples = info.num_samples();
  params.seed = options.seed;
  params.world_size = options.world_size;
  params.batch_size = options.batch_size;
  params.drop_last = options.drop_last;
  params.shuffle = options.shuffle;
  ASSIGN_OR_RETURN(const int64_t samples_per_rank, SamplesPerRank(params));
  ASSIGN_OR_RETURN(const int64_t batches_per_epoch, BatchesPerRank(params));
  // The default pipeline's shape until the first batch tells.
  const uint64_t batch_bytes_estimate =
      uint64_t{options.batch_size} * info.height() * info.width() * 3;
  if (!discovery->sources().dynamic()) {
    discovery.reset();  // nothing to follow
  }
  auto loader = std::make_unique<GrpcRemoteLoader>(
      options, std::move(channels), std::move(endpoints), std::move(discovery), Describe(info),
      params, samples_per_rank, batches_per_epoch, batch_bytes_estimate);
  loader->Start();
  return loader;
}

}  // namespace heterodl
