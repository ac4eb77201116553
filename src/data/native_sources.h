// NativeSources: what a server serves of a dataset it decodes itself (an
// image folder, file list, tar shards, COCO file, or a synthetic dataset):
// for each pipeline a stream names, an AssembledSource (a SyntheticSource
// for a synthetic dataset), checked first for what the server allows.
//
//   auto sources = std::make_unique<NativeSources>(std::move(dataset),
//                                                  *Pipeline::Parse(kDefaultPipeline), options);
//   ASSIGN_OR_RETURN(std::shared_ptr<const BatchSource> source, sources->Make(spec));
#ifndef HETERODL_SRC_DATA_NATIVE_SOURCES_H_
#define HETERODL_SRC_DATA_NATIVE_SOURCES_H_

#include <atomic>
#include <memory>
#include <string>

#include "augment/pipeline.h"
#include "src/data/batch_assembler.h"
#include "src/data/batch_source.h"
#include "src/data/dataset.h"

namespace heterodl {

// OK when `pipeline`'s estimated cost per sample is within `limit`; else
// INVALID_ARGUMENT saying which operation costs most and why.
absl::Status CheckPipelineCost(const Pipeline& pipeline, double limit);

// INVALID_ARGUMENT when `pipeline` makes several views of a sample and
// `dataset` is not one of images and labels alone (masks, boxes, synthetic).
absl::Status CheckViewsFit(const Pipeline& pipeline, const Dataset& dataset);

class NativeSources final : public DatasetSources {
 public:
  // `options` apply to every pipeline streams name (the default one was
  // parsed with them); `max_sample_pixel_operations` bounds what one of
  // them may cost per sample (RequestLimits').
  NativeSources(Dataset dataset, Pipeline default_pipeline, PipelineOptions options,
                double max_sample_pixel_operations);
  // Says what reading from object storage took, when the dataset is there.
  ~NativeSources() override;

  const Dataset& dataset() const { return dataset_; }
  // How the dataset's masks' ids go in batches (kNone without masks).
  MaskIds mask_ids() const { return mask_ids_; }

  // DatasetSources.
  uint64_t fingerprint() const override { return dataset_.fingerprint(); }
  size_t num_samples() const override { return dataset_.size(); }
  const std::string& name() const override { return dataset_.source(); }
  std::vector<uint64_t> shard_sizes() const override { return dataset_.shard_sizes(); }
  std::string default_pipeline() const override { return default_spec_; }
  std::shared_ptr<const BatchSource> default_source() const override { return default_source_; }
  absl::StatusOr<std::shared_ptr<const BatchSource>> Make(
      const std::string& pipeline) const override;
  void Describe(v1::DatasetInfo& info) const override;
  uint64_t pipelines_refused_costly() const override { return refused_costly_.load(); }

 private:
  std::shared_ptr<const BatchSource> SourceOf(Pipeline pipeline) const;

  // Not const: reads ahead are enabled on it where it stays.
  Dataset dataset_;
  const MaskIds mask_ids_;
  const PipelineOptions options_;
  const double max_sample_pixel_operations_;
  const std::string default_spec_;
  const std::shared_ptr<const BatchSource> default_source_;
  mutable std::atomic<uint64_t> refused_costly_{0};
};

}  // namespace heterodl

#endif  // HETERODL_SRC_DATA_NATIVE_SOURCES_H_
