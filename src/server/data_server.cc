#include "src/server/data_server.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "augment/pipeline.h"
#include "src/common/fingerprint.h"
#include "src/common/log.h"
#include "src/common/memory/shared_regions.h"
#include "src/common/net/host_port.h"
#include "src/common/status_macros.h"
#include "src/data/batch_assembler.h"
#include "src/data/native_sources.h"
#include "src/data/python/python_sources.h"
#include "src/server/batch_service.h"
#include "src/server/grpc_data_server.h"
#include "src/server/pixel_channel_listener.h"
#include "src/storage/object_url.h"
#include "src/storage/s3_client.h"
#include "src/wire/batch_layout.h"

namespace heterodl {
namespace {

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

// Starts a server of a user's own Python dataset: its workers first (the
// dataset's errors stop the start), then the service over them.
absl::StatusOr<std::unique_ptr<DataServer>> StartPythonServer(const DataServerOptions& options) {
  ASSIGN_OR_RETURN(PixelChannels pixel_channels, ListenForPixelChannels(options));
  // The workers write batches into shared memory whether or not a same-host
  // loader reads them there.
  std::shared_ptr<SharedRegions> regions = pixel_channels.shared_regions != nullptr
                                               ? pixel_channels.shared_regions
                                               : SharedRegions::Create();
  ASSIGN_OR_RETURN(std::shared_ptr<PythonDataset> python,
                   PythonDataset::Start(options.python, regions));
  std::vector<std::string> fields;
  for (const v1::FieldSpec& field : python->fields()) {
    fields.push_back(DescribeField(field));
  }
  LogInfo("Python dataset %s: %d samples, fields %s, fingerprint %s; %d worker processes (%s)",
          python->source(), python->size(), absl::StrJoin(fields, ", "),
          FingerprintToHex(python->fingerprint()), python->workers(), options.python.worker.python);
  // A thread per worker, each waiting on its worker's sample.
  const int threads = python->workers();
  auto service =
      std::make_unique<BatchService>(std::make_unique<PythonSources>(std::move(python)), threads,
                                     options.requests, /*worker_nice=*/0, regions->allocator());
  auto server = std::make_unique<GrpcDataServer>(options, std::move(pixel_channels.listener),
                                                 std::move(service));
  RETURN_IF_ERROR(server->Listen());
  return server;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataServer>> DataServer::Start(const DataServerOptions& options) {
  if (!options.python.worker.dataset.empty()) {
    return StartPythonServer(options);
  }
  RunPipelinesOnCallerThreadsOnly();
  // Reads from object storage still running when the server has stopped
  // serving end at once: a stalled bucket does not hold a SIGTERM for the
  // minutes its retries could take.
  auto cancel_reads = std::make_shared<std::atomic<bool>>(false);
  DatasetLimits files = options.files;
  if (IsObjectUrl(options.dataset)) {
    if (!files.s3) {
      files.s3 = S3OptionsFromEnvironment(ProcessEnvironment());
    }
    files.s3->http.cancelled = cancel_reads.get();
  }
  absl::StatusOr<Dataset> opened =
      options.synthetic_samples > 0
          ? absl::StatusOr<Dataset>(Dataset::Synthetic(options.synthetic_samples, 1000))
          : Dataset::Open(options.dataset, files);
  RETURN_IF_ERROR(opened.status());
  Dataset dataset = std::move(*opened);
  if (const Dataset::MissingFiles missing = dataset.FindMissingFiles(); missing.count > 0) {
    const std::string what = absl::StrCat(
        missing.count, " of the ", dataset.size(), " files ", dataset.source(),
        " lists do not exist or are not regular files: ", absl::StrJoin(missing.first, ", "),
        missing.count > missing.first.size() ? ", ..." : "");
    if (options.strict_dataset) {
      return absl::FailedPreconditionError(absl::StrCat(what, " (--strict-dataset)"));
    }
    LogWarning("%s; their samples will be replaced (--strict-dataset refuses to serve)", what);
  }
  ASSIGN_OR_RETURN(
      Pipeline pipeline,
      Pipeline::Parse(options.pipeline.empty() ? std::string(kDefaultPipeline) : options.pipeline,
                      options.decoding));
  RETURN_IF_ERROR(CheckPipelineCost(pipeline, options.requests.max_sample_pixel_operations));
  const int threads = options.threads > 0
                          ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  LogInfo("dataset %s: %d samples, %d classes, fingerprint %s; pipeline %s; %d threads",
          dataset.source(), dataset.size(), dataset.class_names().size(),
          FingerprintToHex(dataset.fingerprint()), pipeline.CanonicalSpec(), threads);
  ASSIGN_OR_RETURN(PixelChannels pixel_channels, ListenForPixelChannels(options));
  auto sources =
      std::make_unique<NativeSources>(std::move(dataset), std::move(pipeline), options.decoding,
                                      options.requests.max_sample_pixel_operations);
  // The masks' ids as the sources read them from the dataset (MaskIdsOf).
  const MaskIds mask_ids = sources->mask_ids();
  auto service = std::make_unique<BatchService>(
      std::move(sources), threads, options.requests, options.worker_nice,
      pixel_channels.shared_regions != nullptr ? pixel_channels.shared_regions->allocator()
                                               : HostAllocator{});
  if (mask_ids != MaskIds::kNone) {
    const int most = mask_ids == MaskIds::kInt32 ? 65535 : 255;
    if (options.decoding.mask_ignore_index < 0 || options.decoding.mask_ignore_index > most) {
      return absl::InvalidArgumentError(
          absl::StrCat("--ignore-index ", options.decoding.mask_ignore_index,
                       " does not fit dataset '", options.dataset, "''s masks, ",
                       mask_ids == MaskIds::kInt32 ? "16" : "8", "-bit class ids (0-", most, ")"));
    }
    LogInfo("segmentation masks: %s class ids in batches, %d where no image pixel maps",
            mask_ids == MaskIds::kInt32 ? "16-bit, as int32" : "8-bit, as uint8",
            options.decoding.mask_ignore_index);
  }
  // As the service sized it.
  LogInfo("%d MiB for batches of all streams (--max-memory-mb)",
          service->MemoryStats().capacity >> 20);
  auto server = std::make_unique<GrpcDataServer>(options, std::move(pixel_channels.listener),
                                                 std::move(service), std::move(cancel_reads));
  RETURN_IF_ERROR(server->Listen());
  return server;
}

}  // namespace heterodl
