// GrpcRemoteLoader: RemoteLoader over gRPC, as RemoteLoader::Connect makes
// it. It is the wiring between three parts: the FeedSchedule (which batch
// ids to ask of which connection, what to hand the trainer next: all the
// decisions, src/client/feed_schedule.h), one ServerConnection per
// connection (a stream's life, src/client/server_connection.h), and the
// servers' discovery (servers that join and leave).
//
// Lock order: mu_, then a connection's own lock (the loader sends requests
// and cancels streams under mu_; connections call back without theirs).
#ifndef HETERODL_SRC_CLIENT_GRPC_REMOTE_LOADER_H_
#define HETERODL_SRC_CLIENT_GRPC_REMOTE_LOADER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/client/feed_schedule.h"
#include "src/client/remote_loader.h"
#include "src/client/sample_failure_budget.h"
#include "src/client/server_channel.h"
#include "src/client/server_connection.h"
#include "src/client/server_discovery.h"
#include "src/client/server_health_log.h"
#include "src/plan/epoch_plan.h"

namespace heterodl {

class GrpcRemoteLoader final : public RemoteLoader, private ConnectionEvents {
 public:
  // The loader's window, in batches, whatever the memory budget says.
  static constexpr int kMinWindow = 2;
  static constexpr int kMaxWindow = 256;

  // `connections`: connections_per_server per server, not started;
  // `discovery` null when the servers are fixed. `settings` are the
  // connections' (and those discovery adds).
  GrpcRemoteLoader(RemoteLoaderOptions options, ServerChannels channels,
                   std::shared_ptr<const ConnectionSettings> settings,
                   std::vector<std::unique_ptr<ServerConnection>> connections,
                   std::unique_ptr<ServerDiscovery> discovery, DatasetDescription dataset,
                   PlanParams params, int64_t samples_per_rank, int64_t batches_per_epoch,
                   uint64_t batch_bytes_estimate);
  // Closes every connection and waits for their threads.
  ~GrpcRemoteLoader() override;
  GrpcRemoteLoader(const GrpcRemoteLoader&) = delete;
  GrpcRemoteLoader& operator=(const GrpcRemoteLoader&) = delete;

  // Starts the connections' threads, and discovery's.
  void Start() ABSL_LOCKS_EXCLUDED(mu_);

  // RemoteLoader.
  const DatasetDescription& dataset() const override { return dataset_; }
  int64_t size() const override { return batches_per_epoch_; }
  int64_t samples_per_rank() const override { return samples_per_rank_; }
  using RemoteLoader::SetEpoch;
  absl::Status SetEpoch(uint32_t epoch, int64_t start_batch) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status SetEnd(uint32_t epoch, int64_t end_batch) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::optional<Batch>> Next() override ABSL_LOCKS_EXCLUDED(mu_);
  LoaderPosition position() const override ABSL_LOCKS_EXCLUDED(mu_);
  LoaderStats stats() const override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // ConnectionEvents: called by the connections' threads.
  void LimitsKnown(int connection, const StreamLimits& limits) override ABSL_LOCKS_EXCLUDED(mu_);
  void StreamOpened(int connection) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<uint64_t> Admit(int connection, const v1::Batch& header) override
      ABSL_LOCKS_EXCLUDED(mu_);
  void Received(int connection, DecodedBatch batch) override ABSL_LOCKS_EXCLUDED(mu_);
  bool StreamEnded(int connection, const StreamEnd& end) override ABSL_LOCKS_EXCLUDED(mu_);

  bool DeliverableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The window and the connections' ceilings follow the batch size in
  // bytes: first estimated from the servers' default pipeline, then learnt.
  void LearnBatchBytesLocked(uint64_t batch_bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets connection `c`'s ceiling from what its server allows.
  void ApplyLimitsLocked(int c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks connection `c`'s server for what the schedule gives it now.
  void DispatchLocked(int c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DispatchAllLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The servers in use (not retired), each once, sorted.
  std::vector<std::string> ServersLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A server sitting on requested batches for too long loses them.
  void CancelStalledLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status StallErrorLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the loader with `error` (a plan a server refused): every
  // connection closes, and Next() returns it.
  void FailLocked(absl::Status error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Re-reads the servers' sources every discovery_interval and follows them.
  void DiscoveryLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Retires the connections of servers no longer listed and opens
  // connections to servers newly listed.
  void FollowServersLocked(const std::vector<std::string>& servers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The plan of `epoch`, built once and kept while the window may need it.
  absl::StatusOr<std::shared_ptr<const EpochPlan>> PlanFor(uint32_t epoch) ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  const RemoteLoaderOptions options_;
  const ServerChannels channels_;
  const std::shared_ptr<const ConnectionSettings> settings_;
  // Only the discovery thread uses it.
  const std::unique_ptr<ServerDiscovery> discovery_;
  const DatasetDescription dataset_;
  const PlanParams params_;
  const int64_t samples_per_rank_;
  const int64_t batches_per_epoch_;
  std::thread discovery_thread_;

  mutable absl::Mutex mu_;
  // Guarded by mu_.
  FeedSchedule schedule_ ABSL_GUARDED_BY(mu_);
  // One per connection, numbered as the schedule numbers them; never erased
  // (a server no longer listed has its connections retired and closed), so
  // a connection outlives its thread's calls back here.
  std::vector<std::unique_ptr<ServerConnection>> connections_ ABSL_GUARDED_BY(mu_);
  // Per connection: what its server allows one stream.
  std::vector<StreamLimits> limits_ ABSL_GUARDED_BY(mu_);
  ServerHealthLog health_ ABSL_GUARDED_BY(mu_);
  SampleFailureBudget failures_ ABSL_GUARDED_BY(mu_);
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
};

}  // namespace heterodl

#endif  // HETERODL_SRC_CLIENT_GRPC_REMOTE_LOADER_H_
