// SyntheticSource: batches of a synthetic dataset (`serve --synthetic N`),
// whose pixels are all BatchAssembler::kSyntheticPixel: they differ only in
// their labels and indices, so the pixels of each batch size are built once
// and shared by every batch after (what `bench transport` measures is the
// wire, not decoding). A batch is one item and reserves no memory: its
// bytes are the shared ones.
#ifndef HETERODL_SRC_DATA_SYNTHETIC_SOURCE_H_
#define HETERODL_SRC_DATA_SYNTHETIC_SOURCE_H_

#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "augment/pipeline.h"
#include "src/data/batch_assembler.h"
#include "src/data/batch_source.h"
#include "src/data/dataset.h"

namespace heterodl {

class SyntheticSource final : public BatchSource {
 public:
  // REQUIRES: `dataset` is synthetic, and outlives the source.
  SyntheticSource(const Dataset& dataset, Pipeline pipeline);

  // BatchSource.
  const FieldSpecs& fields() const override { return fields_; }
  uint64_t ReservedBytes(uint32_t /*samples*/) const override { return 0; }
  int Items(uint32_t /*samples*/) const override { return 1; }
  double ItemCost(uint32_t /*samples*/) const override { return 1; }
  void Describe(v1::DatasetInfo& info) const override;
  absl::StatusOr<std::unique_ptr<SourceBatch>> Start(const BatchRequestSpec& request,
                                                     BatchPayload& payload) const override;

 private:
  class Batch;

  // The pixels of a batch of `samples`, built on first use. Bounded: a
  // client cycling through batch sizes does not grow it forever (batches
  // being sent keep their own reference).
  std::shared_ptr<const std::vector<uint8_t>> PixelsOf(size_t samples) const
      ABSL_LOCKS_EXCLUDED(mu_);

  const Pipeline pipeline_;
  const BatchAssembler assembler_;  // refers to pipeline_
  const FieldSpecs fields_;
  mutable absl::Mutex mu_;
  mutable std::map<size_t, std::shared_ptr<const std::vector<uint8_t>>> pixels_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace heterodl

#endif  // HETERODL_SRC_DATA_SYNTHETIC_SOURCE_H_
