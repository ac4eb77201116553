// BatchAssembler: reads, decodes and augments the samples of one batch into
// caller-provided buffers, one per field: images uint8 NHWC and, for a
// segmentation dataset, masks of class ids [N, H, W].
//
//   BatchAssembler assembler(dataset, pipeline);
//   std::vector<uint8_t> images(indices.size() * assembler.image_bytes());
//   std::vector<uint8_t> masks(indices.size() * assembler.mask_bytes());
//   std::vector<SlotResult> slots = assembler.Assemble(
//       {seed, epoch, indices}, {images.data(), masks.data()}, &times);
//
// A sample that cannot be read or decoded never fails the batch: its slot is
// filled by a replacement sample picked deterministically from (seed, epoch,
// index), or with zeros (its mask with the ignore index) if no replacement
// decodes either, and the slot says so. A mask that cannot be read, is not
// class ids or is not its image's size fails its sample the same way.
// Thread-safe: many workers may assemble batches at once.
#ifndef HETERODL_SRC_DATA_BATCH_ASSEMBLER_H_
#define HETERODL_SRC_DATA_BATCH_ASSEMBLER_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "augment/pipeline.h"
#include "opencv2/core/mat.hpp"
#include "src/data/batch_source.h"
#include "src/data/dataset.h"

namespace heterodl {

// How a segmentation dataset's class ids are put in batches: its masks are
// 8-bit (gray, packed or palette PNGs: uint8 batches) or 16-bit (int32
// batches, as torch has no uint16 to hand a loss).
enum class MaskIds { kNone, kUint8, kInt32 };

// The ids a dataset's masks need: kNone without masks; else as its first
// mask that decodes (of the first few), kUint8 when none does (its samples
// fail as they are built). `max_pixels`: as PipelineOptions'.
MaskIds MaskIdsOf(const Dataset& dataset, int64_t max_pixels);

// A slot's SlotResult::failure: `status`, after the sample's `path` unless
// its message names it already.
std::string DescribeFailure(absl::string_view path, const absl::Status& status);

// Where one batch's fields go.
struct BatchDestination {
  uint8_t* images = nullptr;  // samples x image_bytes()
  uint8_t* masks = nullptr;   // samples x mask_bytes(); with masks only
  // A multi-view pipeline's groups after the first (whose views go to
  // `images`): samples x view_groups()[g].bytes() each.
  std::vector<uint8_t*> more_views;
};

class BatchAssembler {
 public:
  // `dataset` and `pipeline` must outlive the assembler. A segmentation
  // dataset's masks are moved with their images (Pipeline::Run), as `mask_ids`
  // (MaskIdsOf(dataset) when it has masks), and padding fills them with the
  // pipeline's mask_ignore_index.
  BatchAssembler(const Dataset& dataset, const Pipeline& pipeline, MaskIds mask_ids);

  // Bytes of one sample's image, and of its mask (0 without masks).
  // A multi-view pipeline's image bytes are its first group's views.
  size_t image_bytes() const { return pipeline_.view_groups().front().bytes(); }
  size_t mask_bytes() const;
  // Of all its fields together.
  size_t sample_bytes() const { return pipeline_.output_bytes() + mask_bytes(); }
  MaskIds mask_ids() const { return mask_ids_; }
  // Whether slots carry their images' boxes (a detection dataset).
  bool has_boxes() const { return dataset_.has_boxes(); }
  const Pipeline& pipeline() const { return pipeline_; }

  // Writes indices.size() samples to `destination`.
  // REQUIRES: every index < dataset size (validated by the caller).
  std::vector<SlotResult> Assemble(const BatchRequestSpec& request,
                                   const BatchDestination& destination,
                                   StageSeconds* seconds) const;

  // One slot of Assemble: writes sample `slot` of `destination`. Slots of
  // one batch may be assembled concurrently, on different threads, with
  // different `seconds`.
  // REQUIRES: slot < request.indices.size(); the index < dataset size.
  SlotResult AssembleSlot(const BatchRequestSpec& request, size_t slot,
                          const BatchDestination& destination, StageSeconds* seconds) const;

  // The slots of a batch of a synthetic dataset, whose pixels are all
  // kSyntheticPixel: such batches differ only in their slots, so a server can
  // build the pixels once and send them again (Assemble writes the same).
  // REQUIRES: the dataset is synthetic.
  std::vector<SlotResult> SyntheticSlots(absl::Span<const int64_t> indices) const;
  static constexpr uint8_t kSyntheticPixel = 128;

  // Samples that failed so far (each counted once), for stats.
  int64_t distinct_failed_samples() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Reads and augments one sample into `image` (and its mask into `mask`,
  // with masks); sets `*warned` when it was decoded around damage. Logs the
  // first failure or warning of each sample.
  // With a detection dataset, the sample's boxes go through the pipeline
  // into `slot`'s boxes, labels and crowd flags.
  absl::Status LoadSample(const BatchRequestSpec& request, int64_t index,
                          const std::vector<uint8_t*>& views, uint8_t* mask, StageSeconds* seconds,
                          SlotResult* slot) const ABSL_LOCKS_EXCLUDED(mu_);
  // Sample `index`'s mask, decoded, for Pipeline::Run to move into `out`.
  absl::StatusOr<cv::Mat> ReadMask(int64_t index, StageSeconds* seconds) const;
  // True the first time sample `index` fails (or, with `failure` false, is
  // decoded with a warning): each is logged once.
  bool FirstReport(bool failure, int64_t index) const ABSL_LOCKS_EXCLUDED(mu_);

  const Dataset& dataset_;
  const Pipeline& pipeline_;
  const MaskIds mask_ids_;
  mutable absl::Mutex mu_;
  mutable absl::flat_hash_set<int64_t> reported_failures_ ABSL_GUARDED_BY(mu_);
  mutable absl::flat_hash_set<int64_t> reported_warnings_ ABSL_GUARDED_BY(mu_);
};

}  // namespace heterodl

#endif  // HETERODL_SRC_DATA_BATCH_ASSEMBLER_H_
