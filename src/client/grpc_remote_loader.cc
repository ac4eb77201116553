#include "src/client/grpc_remote_loader.h"

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "src/client/batch_check.h"
#include "src/common/log.h"
#include "src/common/status_macros.h"
#include "src/wire/batch_layout.h"

namespace heterodl {
namespace {

// How often a waiting Next() asks the caller whether it was interrupted.
constexpr absl::Duration kInterruptPoll = absl::Milliseconds(200);
// Epoch plans kept for checking batches (the window spans a few epochs at
// most unless epochs are tiny, and then so are the plans).
constexpr size_t kPlansKept = 64;

// Errors that retrying elsewhere cannot fix: the client's plan is refused.
bool IsFatal(const absl::Status& status) {
  return absl::IsFailedPrecondition(status) || absl::IsInvalidArgument(status) ||
         absl::IsUnimplemented(status);
}

FeedOptions FeedOptionsFor(const RemoteLoaderOptions& options) {
  FeedOptions feed;
  feed.across_epochs = options.prefetch_across_epochs;
  return feed;
}

// REQUIRES: CheckBatchHeader(decoded.header, ..., fields, ...) was OK.
// `labelled_images`: a Python dataset whose first field is its images.
Batch ToBatch(DecodedBatch decoded, const google::protobuf::RepeatedPtrField<v1::FieldSpec>& fields,
              bool labelled_images) {
  const v1::Batch& header = decoded.header;
  Batch batch;
  absl::StatusOr<BatchLayout> layout =
      LayOutBatch(fields, static_cast<uint32_t>(header.labels_size()), header.ragged_lengths(),
                  header.collated_shapes(), std::numeric_limits<uint64_t>::max());
  if (layout.ok()) {
    batch.fields = std::move(layout->fields);
  }
  for (size_t f = 0; f < batch.fields.size(); ++f) {
    if (batch.fields[f].name == "images") {
      batch.images_field = static_cast<int>(f);
    }
  }
  if (labelled_images && !batch.fields.empty()) {
    batch.images_field = 0;
  }
  batch.epoch = header.id().epoch();
  batch.index = header.id().index();
  batch.payload = std::move(decoded.pixels);
  batch.labels.assign(header.labels().begin(), header.labels().end());
  batch.indices.assign(header.indices().begin(), header.indices().end());
  batch.status.reserve(header.status_size());
  for (const int status : header.status()) {
    batch.status.push_back(static_cast<SlotStatus>(status));  // CheckBatchHeader knew each
  }
  if (header.sources_size() > 0) {
    batch.sources.assign(header.sources().begin(), header.sources().end());
  } else {
    batch.sources = batch.indices;
  }
  batch.failures.assign(header.failures().begin(), header.failures().end());
  batch.failed = static_cast<int>(header.failed());
  batch.decoded_with_warnings = static_cast<int>(header.decoded_with_warnings());
  return batch;
}

void Say(const std::optional<HealthLine>& line) {
  if (!line) {
    return;
  }
  if (line->warning) {
    LogWarning("%s", line->text);
  } else {
    LogInfo("%s", line->text);
  }
}

}  // namespace

GrpcRemoteLoader::GrpcRemoteLoader(RemoteLoaderOptions options, ServerChannels channels,
                                   std::shared_ptr<const ConnectionSettings> settings,
                                   std::vector<std::unique_ptr<ServerConnection>> connections,
                                   std::unique_ptr<ServerDiscovery> discovery,
                                   DatasetDescription dataset, PlanParams params,
                                   int64_t samples_per_rank, int64_t batches_per_epoch,
                                   uint64_t batch_bytes_estimate)
    : options_(std::move(options)),
      channels_(std::move(channels)),
      settings_(std::move(settings)),
      discovery_(std::move(discovery)),
      dataset_(std::move(dataset)),
      params_(std::move(params)),
      samples_per_rank_(samples_per_rank),
      batches_per_epoch_(batches_per_epoch),
      schedule_(batches_per_epoch, static_cast<int>(connections.size()), FeedOptionsFor(options_)),
      connections_(std::move(connections)),
      limits_(connections_.size()),
      failures_({options_.max_failed_fraction, samples_per_rank, dataset_.source}) {
  absl::MutexLock lock(&mu_);
  LearnBatchBytesLocked(batch_bytes_estimate);
}

GrpcRemoteLoader::~GrpcRemoteLoader() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (const std::unique_ptr<ServerConnection>& connection : connections_) {
      connection->Close();
    }
  }
  // No connection is added once discovery has stopped.
  if (discovery_thread_.joinable()) {
    discovery_thread_.join();
  }
  std::vector<ServerConnection*> connections;
  {
    absl::MutexLock lock(&mu_);
    for (const std::unique_ptr<ServerConnection>& connection : connections_) {
      connections.push_back(connection.get());
    }
  }
  // Outside the lock: their threads call back until they end.
  for (ServerConnection* connection : connections) {
    connection->Join();
  }
}

void GrpcRemoteLoader::Start() {
  absl::MutexLock lock(&mu_);
  for (const std::unique_ptr<ServerConnection>& connection : connections_) {
    connection->Start(*this);
  }
  if (discovery_ != nullptr) {
    discovery_thread_ = std::thread([this] { DiscoveryLoop(); });
  }
}

absl::Status GrpcRemoteLoader::SetEpoch(uint32_t epoch, int64_t start_batch) {
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
  failures_.StartEpoch(epoch);
  DispatchAllLocked();
  return absl::OkStatus();
}

absl::Status GrpcRemoteLoader::SetEnd(uint32_t epoch, int64_t end_batch) {
  if (end_batch < 0 || end_batch > size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("end batch ", end_batch, " outside [0, ", size(), "]"));
  }
  absl::MutexLock lock(&mu_);
  schedule_.SetEnd({epoch, end_batch});
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Batch>> GrpcRemoteLoader::Next() {
  absl::MutexLock lock(&mu_);
  if (!started_) {
    // Next() without SetEpoch(): epoch 0 from its start.
    started_ = true;
    schedule_.Reposition(0, 0);
    DispatchAllLocked();
  }
  // A stall is time spent waiting here with nothing arriving: however long
  // the trainer took since its last call does not count.
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
      SampleFailureBudget::Verdict verdict = failures_.Note(*batch, absl::Now());
      if (verdict.log_line) {
        LogWarning("%s", *verdict.log_line);
      }
      if (!verdict.over.ok()) {
        FailLocked(verdict.over);
        return error_;
      }
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

LoaderPosition GrpcRemoteLoader::position() const {
  absl::MutexLock lock(&mu_);
  const BatchKey key = schedule_.position();
  return {key.epoch, key.index};
}

LoaderStats GrpcRemoteLoader::stats() const {
  absl::MutexLock lock(&mu_);
  const FeedStats& feed = schedule_.stats();
  LoaderStats stats;
  stats.requested = feed.requested;
  stats.received = feed.received;
  stats.delivered = feed.delivered;
  stats.dropped = feed.dropped;
  stats.reassigned = feed.reassigned;
  stats.held_ahead = schedule_.held_ahead();
  stats.in_flight = schedule_.in_flight();
  stats.stalled = stalled_;
  stats.samples_failed = samples_failed_;
  stats.samples_decoded_with_warnings = samples_decoded_with_warnings_;
  stats.window = schedule_.window();
  for (const std::unique_ptr<ServerConnection>& connection : connections_) {
    if (schedule_.retired(connection->number())) {
      continue;
    }
    stats.depths.push_back(schedule_.depth(connection->number()));
    if (connection->same_host()) {
      ++stats.same_host_streams;
    }
  }
  stats.servers = ServersLocked();
  return stats;
}

void GrpcRemoteLoader::LimitsKnown(int connection, const StreamLimits& limits) {
  absl::MutexLock lock(&mu_);
  limits_[connection] = limits;
  ApplyLimitsLocked(connection);
}

void GrpcRemoteLoader::StreamOpened(int connection) {
  absl::MutexLock lock(&mu_);
  DispatchLocked(connection);
}

absl::StatusOr<uint64_t> GrpcRemoteLoader::Admit(int connection, const v1::Batch& header) {
  const BatchKey key{header.id().epoch(), header.id().index()};
  {
    absl::MutexLock lock(&mu_);
    if (header.id().rank() != options_.rank || !schedule_.Expects(connection, key)) {
      return absl::DataLossError(absl::StrCat("unrequested batch ", key.index, " of epoch ",
                                              key.epoch, " from the server"));
    }
  }
  ASSIGN_OR_RETURN(const std::shared_ptr<const EpochPlan> plan, PlanFor(key.epoch));
  return CheckBatchHeader(header, *plan, options_.rank, settings_->fields, options_.max_batch_bytes,
                          settings_->user_fields);
}

void GrpcRemoteLoader::Received(int connection, DecodedBatch batch) {
  const BatchKey key{batch.header.id().epoch(), batch.header.id().index()};
  const ServerTiming timing = TimingOf(batch.header);
  const uint64_t pixel_bytes = batch.pixels.size();
  const int samples = batch.header.labels_size();
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  if (samples > 0) {
    LearnBatchBytesLocked(pixel_bytes / samples * options_.batch_size);
  }
  schedule_.Receive(connection, key,
                    ToBatch(std::move(batch), settings_->fields, dataset_.labelled_images), timing,
                    now);
  last_receipt_ = now;
  Say(health_.Delivering(connections_[connection]->address()));
  DispatchLocked(connection);
}

bool GrpcRemoteLoader::StreamEnded(int connection, const StreamEnd& end) {
  absl::MutexLock lock(&mu_);
  schedule_.Lost(connection);
  DispatchAllLocked();  // what it owed goes to the others
  if (stopping_ || !error_.ok() || schedule_.retired(connection)) {
    return false;
  }
  const std::string& address = connections_[connection]->address();
  // A server serving another dataset is that server's fault, not the
  // plan's: the others go on.
  if (!end.incompatible && IsFatal(end.status)) {
    FailLocked(absl::Status(end.status.code(),
                            absl::StrCat("data server ", address, ": ", end.status.message())));
    return false;
  }
  const std::vector<std::string> servers = ServersLocked();
  const int others = static_cast<int>(servers.size()) -
                     (std::binary_search(servers.begin(), servers.end(), address) ? 1 : 0);
  Say(health_.StreamFailed(address, {end.status, end.left, end.retry_every, others}, absl::Now()));
  return true;
}

bool GrpcRemoteLoader::DeliverableLocked() const {
  return !error_.ok() || schedule_.AtEndOfEpoch() || schedule_.NextReady();
}

void GrpcRemoteLoader::LearnBatchBytesLocked(uint64_t batch_bytes) {
  batch_bytes = std::max<uint64_t>(batch_bytes, 1);
  if (batch_bytes == batch_bytes_) {
    return;
  }
  batch_bytes_ = batch_bytes;
  schedule_.SetWindow(static_cast<int>(
      std::clamp<uint64_t>(options_.max_buffered_bytes / batch_bytes_, kMinWindow, kMaxWindow)));
  for (size_t c = 0; c < connections_.size(); ++c) {
    ApplyLimitsLocked(static_cast<int>(c));
  }
}

// Half of what the server lets one stream have outstanding: it counts a
// batch until its write completes there, which can be after it arrived here
// and a new request left, so a loader at its limit would be refused.
void GrpcRemoteLoader::ApplyLimitsLocked(int c) {
  const StreamLimits& limits = limits_[c];
  uint64_t depth = limits.max_batches;
  if (limits.max_bytes > 0) {
    depth = std::min<uint64_t>(depth, limits.max_bytes / batch_bytes_);
  }
  schedule_.SetMaxDepth(c, static_cast<int>(std::min<uint64_t>(depth / 2, 1 << 16)));
}

void GrpcRemoteLoader::DispatchLocked(int c) {
  ServerConnection& connection = *connections_[c];
  if (!connection.streaming()) {
    return;  // asked once its stream opens (StreamOpened)
  }
  for (const BatchKey& key : schedule_.TakeRequests(c, absl::Now())) {
    v1::BatchRequest request;
    request.mutable_batch()->set_epoch(key.epoch);
    request.mutable_batch()->set_rank(options_.rank);
    request.mutable_batch()->set_index(static_cast<uint32_t>(key.index));
    // Refused when the stream broke or just ended: the connection's thread
    // sees that and tells StreamEnded, which gives its batches back (Lost).
    (void)connection.Send(request);
  }
}

void GrpcRemoteLoader::DispatchAllLocked() {
  for (size_t c = 0; c < connections_.size(); ++c) {
    DispatchLocked(static_cast<int>(c));
  }
}

std::vector<std::string> GrpcRemoteLoader::ServersLocked() const {
  std::set<std::string> servers;
  for (const std::unique_ptr<ServerConnection>& connection : connections_) {
    if (!schedule_.retired(connection->number())) {
      servers.insert(connection->address());
    }
  }
  return {servers.begin(), servers.end()};
}

void GrpcRemoteLoader::CancelStalledLocked(absl::Time now) {
  for (const int c : schedule_.Stalled(now, options_.stall_timeout / 2)) {
    LogWarning("data server %s stalled for %s; %s", connections_[c]->address(),
               absl::FormatDuration(options_.stall_timeout / 2),
               ServersLocked().size() > 1 ? "giving its batches to others"
                                          : "asking it again on a new stream");
    connections_[c]->CancelStream();
    schedule_.ResetStallClock(c, now);
    ++stalled_;
  }
}

absl::Status GrpcRemoteLoader::StallErrorLocked() const {
  std::vector<std::string> states;
  for (const std::string& address : ServersLocked()) {
    states.push_back(absl::StrCat(address, " (", health_.Describe(address), ")"));
  }
  if (states.empty()) {
    states.push_back("none is listed now");
  }
  return absl::DeadlineExceededError(absl::StrCat("no batch from any data server for ",
                                                  absl::FormatDuration(options_.stall_timeout),
                                                  ": ", absl::StrJoin(states, ", ")));
}

void GrpcRemoteLoader::FailLocked(absl::Status error) {
  error_ = std::move(error);
  for (const std::unique_ptr<ServerConnection>& connection : connections_) {
    connection->Close();
  }
}

void GrpcRemoteLoader::DiscoveryLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.discovery_interval);
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

void GrpcRemoteLoader::FollowServersLocked(const std::vector<std::string>& servers) {
  const std::set<std::string> listed(servers.begin(), servers.end());
  const std::vector<std::string> in_use = ServersLocked();
  std::set<std::string> unlisted;
  for (const std::unique_ptr<ServerConnection>& connection : connections_) {
    if (schedule_.retired(connection->number()) || listed.count(connection->address()) > 0) {
      continue;
    }
    unlisted.insert(connection->address());
    schedule_.Retire(connection->number());
    connection->Close();
  }
  for (const std::string& address : unlisted) {
    LogInfo("data server %s is no longer listed; its batches go to the others", address);
  }
  for (const std::string& address : servers) {
    if (std::binary_search(in_use.begin(), in_use.end(), address)) {
      continue;
    }
    LogInfo("data server %s listed; checking its dataset, then sending it batches", address);
    for (int n = 0; n < options_.connections_per_server; ++n) {
      const int c = schedule_.AddConnection();
      connections_.push_back(
          std::make_unique<ServerConnection>(c, address, channels_.Open(address, n), settings_));
      limits_.emplace_back();
      ApplyLimitsLocked(c);
      connections_.back()->Start(*this);
    }
  }
  DispatchAllLocked();
}

absl::StatusOr<std::shared_ptr<const EpochPlan>> GrpcRemoteLoader::PlanFor(uint32_t epoch) {
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
  while (!plans_.empty() && (plans_.begin()->first < trainer_epoch || plans_.size() > kPlansKept)) {
    plans_.erase(plans_.begin());
  }
  return shared;
}

}  // namespace heterodl
