// AssembledSource: batches of a dataset's images decoded and augmented by a
// Pipeline (BatchAssembler), with what the dataset has beside them: masks
// moved with their images (segmentation), each image's boxes as ragged
// fields (detection), or several views of each image in a field per group
// (multi-view pipelines).
//
//   AssembledSource source(dataset, *Pipeline::Parse(spec), MaskIdsOf(dataset, max_pixels));
//   source.fields();  // images [H, W, 3] (+ masks [H, W] | boxes, box_labels, iscrowd)
//
// Every item is one sample, built into its rows of every dense field; the
// boxes are gathered from the slots and placed after the dense fields when
// the batch finishes.
#ifndef HETERODL_SRC_DATA_ASSEMBLED_SOURCE_H_
#define HETERODL_SRC_DATA_ASSEMBLED_SOURCE_H_

#include <memory>

#include "augment/pipeline.h"
#include "src/data/batch_assembler.h"
#include "src/data/batch_source.h"
#include "src/data/dataset.h"

namespace heterodl {

// The fields of `assembler`'s batches, as DatasetInfo.fields declares them:
// images (or views_0, views_1, ... for a multi-view pipeline), masks of the
// dataset's ids, then each sample's boxes, box_labels and iscrowd, ragged.
FieldSpecs FieldsOf(const BatchAssembler& assembler);

class AssembledSource final : public BatchSource {
 public:
  // `dataset` must outlive the source; `mask_ids` as MaskIdsOf(dataset).
  AssembledSource(const Dataset& dataset, Pipeline pipeline, MaskIds mask_ids);

  const Pipeline& pipeline() const { return pipeline_; }
  const BatchAssembler& assembler() const { return assembler_; }

  // BatchSource.
  const FieldSpecs& fields() const override { return fields_; }
  double ItemCost(uint32_t samples) const override;
  void Describe(v1::DatasetInfo& info) const override;
  bool reads_ahead() const override { return dataset_.reads_ahead(); }
  void Prefetch(absl::Span<const int64_t> indices, bool block_plan) const override {
    dataset_.Prefetch(indices, /*whole_chunks=*/block_plan);
  }
  absl::StatusOr<std::unique_ptr<SourceBatch>> Start(const BatchRequestSpec& request,
                                                     BatchPayload& payload) const override;

 private:
  class Batch;

  const Dataset& dataset_;
  const Pipeline pipeline_;
  const BatchAssembler assembler_;  // refers to pipeline_
  const FieldSpecs fields_;
  const double sample_cost_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_DATA_ASSEMBLED_SOURCE_H_
