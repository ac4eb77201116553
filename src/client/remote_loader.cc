#include "src/client/remote_loader.h"

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "src/client/dataset_handshake.h"
#include "src/client/grpc_remote_loader.h"
#include "src/client/loader_plan.h"
#include "src/client/server_channel.h"
#include "src/client/server_connection.h"
#include "src/client/server_discovery.h"
#include "src/common/status_macros.h"
#include "src/plan/epoch_plan.h"
#include "src/wire/pixel_channel.h"
#include "src/wire/plan_config.h"
#include "src/wire/sample_structure.h"

namespace heterodl {
namespace {

// How long a stream waits for its pixel channel connection, and how long a
// server goes without one after that failed.
constexpr absl::Duration kPixelChannelConnectTimeout = absl::Seconds(5);
constexpr absl::Duration kPixelChannelRetryAfter = absl::Minutes(10);
// The pool of received pixels keeps what the window and the trainer's
// batches ever held.
constexpr int kPooledBuffers = GrpcRemoteLoader::kMaxWindow + 8;

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
  if (!(options.max_failed_fraction >= 0 && options.max_failed_fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_failed_fraction must be in [0, 1], got ", options.max_failed_fraction));
  }
  if (options.discovery_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("discovery_interval must be > 0");
  }
  // A malformed address is a mistake to report now, not a server to wait for.
  return ValidateServerSources(options.servers);
}

DatasetDescription Describe(const v1::DatasetInfo& info,
                            const google::protobuf::RepeatedPtrField<v1::FieldSpec>& fields) {
  DatasetDescription dataset;
  for (const v1::FieldSpec& field : fields) {
    dataset.fields.push_back(field.name());
  }
  dataset.source = info.source();
  dataset.fingerprint = info.fingerprint();
  dataset.num_samples = info.num_samples();
  dataset.class_names.assign(info.class_names().begin(), info.class_names().end());
  dataset.height = static_cast<int>(info.height());
  dataset.width = static_cast<int>(info.width());
  if (info.has_sample_structure()) {
    // Printing a message cannot fail: there is no input to reject.
    (void)google::protobuf::util::MessageToJsonString(info.sample_structure(),
                                                      &dataset.sample_structure);
    dataset.labelled_images = IsLabelledImages(info.sample_structure(), info.fields());
  }
  return dataset;
}

// connections_per_server connections per server: the first connection to
// every server, then the second to every server, and so on.
std::vector<std::unique_ptr<ServerConnection>> MakeConnections(
    const ServerChannels& channels, const std::vector<std::string>& servers,
    int connections_per_server, const std::shared_ptr<const ConnectionSettings>& settings) {
  std::vector<std::unique_ptr<ServerConnection>> connections;
  for (int n = 0; n < connections_per_server; ++n) {
    for (const std::string& address : servers) {
      const int number = static_cast<int>(connections.size());
      connections.push_back(
          std::make_unique<ServerConnection>(number, address, channels.Open(address, n), settings));
    }
  }
  return connections;
}

}  // namespace

PlanParams PlanParamsOf(const RemoteLoaderOptions& options, uint64_t num_samples) {
  PlanParams params;
  params.num_samples = num_samples;
  params.seed = options.seed;
  params.world_size = options.world_size;
  params.batch_size = options.batch_size;
  params.drop_last = options.drop_last;
  params.shuffle = options.shuffle;
  params.shuffle_block_shards = options.shuffle_block_shards;
  params.epoch_offset = options.epoch_offset;
  return params;
}

absl::StatusOr<std::unique_ptr<RemoteLoader>> RemoteLoader::Connect(
    const RemoteLoaderOptions& options) {
  RETURN_IF_ERROR(ValidateOptions(options));
  auto discovery = std::make_unique<ServerDiscovery>(options.servers);
  ASSIGN_OR_RETURN(const std::vector<std::string> servers, FirstServers(*discovery, options));
  // A batch with its header, on the gRPC path.
  ASSIGN_OR_RETURN(ServerChannels channels,
                   ServerChannels::Create(options.tls, options.max_batch_bytes + (16 << 20)));
  // Each server's first connection answers for it.
  std::vector<std::unique_ptr<ServerConnection>> first;
  std::vector<const ServerConnection*> asked;
  auto unstarted = std::make_shared<ConnectionSettings>();
  for (const std::string& address : servers) {
    first.push_back(std::make_unique<ServerConnection>(static_cast<int>(first.size()), address,
                                                       channels.Open(address, 0), unstarted));
    asked.push_back(first.back().get());
  }
  ASSIGN_OR_RETURN(const v1::DatasetInfo info, AgreeOnDataset(asked, options));
  first.clear();
  ASSIGN_OR_RETURN(google::protobuf::RepeatedPtrField<v1::FieldSpec> fields, BatchFieldsOf(info));
  PlanParams params = PlanParamsOf(options, info.num_samples());
  if (params.shuffle_block_shards > 0) {
    params.shard_sizes.assign(info.shard_sizes().begin(), info.shard_sizes().end());
  }
  if (absl::Status block = CheckBlockShuffle(params); !block.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the servers' dataset '", info.source(), "': ", block.message()));
  }
  ASSIGN_OR_RETURN(const int64_t samples_per_rank, SamplesPerRank(params));
  ASSIGN_OR_RETURN(const int64_t batches_per_epoch, BatchesPerRank(params));
  // The default pipeline's shape until the first batch tells.
  const uint64_t batch_bytes_estimate =
      uint64_t{options.batch_size} * info.height() * info.width() * 3;
  if (!discovery->sources().dynamic()) {
    discovery.reset();  // nothing to follow
  }
  auto settings = std::make_shared<ConnectionSettings>();
  settings->auth_token = options.auth_token;
  settings->fingerprint = info.fingerprint();
  settings->plan = ToPlanConfig(params, info.fingerprint(), options.pipeline);
  settings->fields = fields;
  settings->user_fields = info.has_sample_structure();
  // Shared by all its streams: a server builds one loader's batches in the
  // order asked, whichever connection asked.
  settings->client_id = PixelTicketBytes(NewPixelTicket());
  settings->max_batch_bytes = options.max_batch_bytes;
  settings->pixels.pixel_channel = options.pixel_channel;
  settings->pixels.same_host_pixels = options.same_host_pixels;
  settings->pixels.tls = options.tls.enabled();
  settings->pixels.connect_timeout = kPixelChannelConnectTimeout;
  settings->pixels.retry_after = kPixelChannelRetryAfter;
  settings->pool = BufferPool::Create(kPooledBuffers, options.pixel_allocator);
  std::vector<std::unique_ptr<ServerConnection>> connections =
      MakeConnections(channels, servers, options.connections_per_server, settings);
  auto loader = std::make_unique<GrpcRemoteLoader>(
      options, std::move(channels), std::move(settings), std::move(connections),
      std::move(discovery), Describe(info, fields), params, samples_per_rank, batches_per_epoch,
      batch_bytes_estimate);
  loader->Start();
  return loader;
}

}  // namespace heterodl
