#include "src/data/native_sources.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/common/log.h"
#include "src/common/status_macros.h"
#include "src/data/assembled_source.h"
#include "src/data/sample_cache.h"
#include "src/data/synthetic_source.h"

namespace heterodl {

absl::Status CheckPipelineCost(const Pipeline& pipeline, double limit) {
  const PipelineCost cost = pipeline.EstimateCost();
  if (cost.pixel_operations <= limit) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "pipeline too costly: about %.0f million pixel operations per sample, over this server's "
      "limit of %.0f million (serve --max-pipeline-cost); most of it is operation %d, %s, on a "
      "%dx%d image (from a %dx%d photo): %.0f million",
      cost.pixel_operations / 1e6, limit / 1e6, cost.costliest_position, cost.costliest_operation,
      cost.costliest_input_width, cost.costliest_input_height, kCostReferenceWidth,
      kCostReferenceHeight, cost.costliest_pixel_operations / 1e6));
}

absl::Status CheckViewsFit(const Pipeline& pipeline, const Dataset& dataset) {
  if (!pipeline.multi_view()) {
    return absl::OkStatus();
  }
  if (dataset.has_masks() || dataset.has_boxes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a pipeline of several views takes images (and labels) alone, but this server's dataset '",
        dataset.source(), "' has ", dataset.has_masks() ? "segmentation masks" : "boxes"));
  }
  if (dataset.synthetic()) {
    return absl::InvalidArgumentError(
        "a pipeline of several views needs images to decode; this server's dataset is synthetic");
  }
  return absl::OkStatus();
}

namespace {

// Reads ahead of a dataset in object storage: in flight at once, and the
// bytes fetched and not yet decoded.
constexpr int kObjectReadsInFlight = 128;
constexpr uint64_t kObjectReadAheadBytes = uint64_t{256} << 20;

}  // namespace

NativeSources::NativeSources(Dataset dataset, Pipeline default_pipeline, PipelineOptions options,
                             double max_sample_pixel_operations)
    : dataset_(std::move(dataset)),
      mask_ids_(MaskIdsOf(dataset_, options.max_pixels)),
      options_(options),
      max_sample_pixel_operations_(max_sample_pixel_operations),
      default_spec_(default_pipeline.CanonicalSpec()),
      default_source_(SourceOf(std::move(default_pipeline))) {
  if (dataset_.in_object_storage()) {
    // A GET waits a round trip (~20 ms to S3 in region) whatever its size:
    // 128 in flight cover ~6,000 samples/s at that latency, while the
    // decode threads decode (docs/object_storage.md).
    dataset_.EnableReadAhead(kObjectReadsInFlight, kObjectReadAheadBytes);
  }
}

NativeSources::~NativeSources() {
  if (!dataset_.in_object_storage()) {
    return;
  }
  const SampleFetcher::Counts ahead = dataset_.read_ahead_counts();
  std::string cached = "no --cache-dir";
  if (const SampleCache* cache = dataset_.cache(); cache != nullptr) {
    const SampleCache::Counts counts = cache->counts();
    cached = absl::StrFormat("cache: %d hits, %d misses, %d entries (%d MiB) in %s", counts.hits,
                             counts.misses, counts.entries, counts.bytes >> 20,
                             cache->folder().string());
  }
  std::string chunks;
  if (const ShardChunks* held = dataset_.chunks(); held != nullptr && held->counts().loaded > 0) {
    const ShardChunks::Counts counts = held->counts();
    chunks = absl::StrFormat(
        "; block plans: %d chunks read (%d MiB), %d reads from memory, %d "
        "chunks let go for room",
        counts.loaded, counts.bytes_loaded >> 20, counts.hits, counts.evicted);
  }
  LogInfo(
      "object storage: %d samples read ahead (%d taken, %d dropped unused), %d read when "
      "asked; %s%s",
      ahead.prefetched, ahead.taken, ahead.dropped, ahead.direct, cached, chunks);
}

std::shared_ptr<const BatchSource> NativeSources::SourceOf(Pipeline pipeline) const {
  if (dataset_.synthetic()) {
    return std::make_shared<const SyntheticSource>(dataset_, std::move(pipeline));
  }
  return std::make_shared<const AssembledSource>(dataset_, std::move(pipeline), mask_ids_);
}

absl::StatusOr<std::shared_ptr<const BatchSource>> NativeSources::Make(
    const std::string& pipeline) const {
  ASSIGN_OR_RETURN(Pipeline parsed, Pipeline::Parse(pipeline, options_));
  RETURN_IF_ERROR(CheckViewsFit(parsed, dataset_));
  if (absl::Status within = CheckPipelineCost(parsed, max_sample_pixel_operations_); !within.ok()) {
    refused_costly_.fetch_add(1, std::memory_order_relaxed);
    return within;
  }
  return SourceOf(std::move(parsed));
}

void NativeSources::Describe(v1::DatasetInfo& info) const {
  info.set_fingerprint(dataset_.fingerprint());
  info.set_num_samples(dataset_.size());
  info.set_source(dataset_.source());
  for (const std::string& name : dataset_.class_names()) {
    info.add_class_names(name);
  }
  info.set_default_pipeline(default_spec_);
  for (const uint64_t size : dataset_.shard_sizes()) {
    info.add_shard_sizes(size);
  }
}

}  // namespace heterodl
