#include "src/data/batch_assembler.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "augment/png_decoder.h"
#include "opencv2/core.hpp"
#include "src/common/counter_rng.h"
#include "src/common/log.h"

namespace heterodl {
namespace {

// Masks MaskIdsOf reads before it settles for 8-bit ids.
constexpr size_t kMasksProbed = 8;

double SecondsSince(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

}  // namespace

MaskIds MaskIdsOf(const Dataset& dataset, int64_t max_pixels) {
  if (!dataset.has_masks()) {
    return MaskIds::kNone;
  }
  for (size_t index = 0; index < std::min(dataset.size(), kMasksProbed); ++index) {
    const absl::StatusOr<std::string> bytes = dataset.ReadMask(index);
    if (!bytes.ok()) {
      continue;
    }
    const absl::StatusOr<cv::Mat> ids = DecodePngMask(*bytes, max_pixels);
    if (ids.ok()) {
      return ids->depth() == CV_16U ? MaskIds::kInt32 : MaskIds::kUint8;
    }
  }
  return MaskIds::kUint8;
}

BatchAssembler::BatchAssembler(const Dataset& dataset, const Pipeline& pipeline, MaskIds mask_ids)
    : dataset_(dataset), pipeline_(pipeline), mask_ids_(mask_ids) {}

size_t BatchAssembler::mask_bytes() const {
  const size_t pixels = static_cast<size_t>(pipeline_.output_height()) * pipeline_.output_width();
  switch (mask_ids_) {
    case MaskIds::kUint8:
      return pixels;
    case MaskIds::kInt32:
      return pixels * sizeof(int32_t);
    case MaskIds::kNone:
      break;
  }
  return 0;
}

std::string DescribeFailure(absl::string_view path, const absl::Status& status) {
  std::string text = status.ToString();
  if (absl::StrContains(text, path)) {
    return text;
  }
  return absl::StrCat("'", path, "': ", text);
}

bool BatchAssembler::FirstReport(bool failure, int64_t index) const {
  absl::MutexLock lock(&mu_);
  return (failure ? reported_failures_ : reported_warnings_).insert(index).second;
}

absl::StatusOr<cv::Mat> BatchAssembler::ReadMask(int64_t index, StageSeconds* seconds) const {
  absl::Time start = absl::Now();
  absl::StatusOr<std::string> bytes = dataset_.ReadMask(static_cast<size_t>(index));
  seconds->read += SecondsSince(start);
  if (!bytes.ok()) {
    return bytes.status();
  }
  start = absl::Now();
  absl::StatusOr<cv::Mat> ids = DecodePngMask(*bytes, pipeline_.options().max_pixels);
  seconds->decode += SecondsSince(start);
  if (!ids.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("its mask: ", ids.status().message()));
  }
  if (mask_ids_ == MaskIds::kUint8 && ids->depth() != CV_8U) {
    return absl::InvalidArgumentError(
        "its mask has 16-bit class ids, where this dataset's batches hold 8-bit ones (as its "
        "first mask has)");
  }
  return ids;
}

absl::Status BatchAssembler::LoadSample(const BatchRequestSpec& request, int64_t index,
                                        const std::vector<uint8_t*>& views, uint8_t* mask,
                                        StageSeconds* seconds, SlotResult* slot) const {
  bool* warned = &slot->decoded_with_warning;
  if (request.abandoned != nullptr && request.abandoned->load(std::memory_order_relaxed)) {
    return absl::CancelledError("abandoned: no stream wants this sample any more");
  }
  absl::Time start = absl::Now();
  absl::StatusOr<std::string> bytes = dataset_.ReadSample(static_cast<size_t>(index));
  seconds->read += SecondsSince(start);
  absl::Status status = bytes.status();
  // With masks: the sample's ids, and where the pipeline leaves them moved
  // (the batch itself for 8-bit ids; widened to int32 after).
  absl::StatusOr<cv::Mat> ids;
  cv::Mat moved;
  SegmentationMask segmentation;
  if (status.ok() && mask_ids_ != MaskIds::kNone) {
    ids = ReadMask(index, seconds);
    status = ids.status();
    if (status.ok()) {
      const int bytes_per_id = static_cast<int>(ids->elemSize());
      if (mask_ids_ == MaskIds::kInt32) {
        moved.create(pipeline_.output_height(), pipeline_.output_width(), ids->type());
      }
      segmentation = {ids->data,
                      ids->cols,
                      ids->rows,
                      bytes_per_id,
                      pipeline_.options().mask_ignore_index,
                      mask_ids_ == MaskIds::kInt32 ? moved.data : mask};
    }
  }
  const Sample& sample = dataset_.sample(static_cast<size_t>(index));
  SampleBoxes boxes;
  if (sample.detection) {
    boxes.boxes = sample.boxes;
  }
  if (status.ok()) {
    PipelineTimings timings;
    const SampleKey key{request.seed, request.epoch, static_cast<uint64_t>(index)};
    status = pipeline_.multi_view()
                 ? pipeline_.RunViews(*bytes, key, views, &timings, request.abandoned)
                 : pipeline_.Run(*bytes, key, views.front(), &timings, request.abandoned,
                                 mask_ids_ != MaskIds::kNone ? &segmentation : nullptr,
                                 sample.detection ? &boxes : nullptr);
    if (absl::IsCancelled(status)) {
      return status;  // not the sample's fault: neither logged nor counted
    }
    seconds->decode += timings.decode_seconds;
    seconds->augment += timings.augment_seconds;
    *warned = status.ok() && !timings.decode_warning.empty();
    if (*warned && FirstReport(/*failure=*/false, index)) {
      LogWarning(
          "sample %d (%s) decoded with a warning (kept; serve --strict-decode replaces "
          "such samples): %s",
          index, dataset_.sample(static_cast<size_t>(index)).path, timings.decode_warning);
    }
  }
  if (status.ok() && mask_ids_ == MaskIds::kInt32) {
    moved.convertTo(cv::Mat(moved.rows, moved.cols, CV_32SC1, mask), CV_32S);
  }
  if (status.ok() && sample.detection) {
    slot->boxes = std::move(boxes.kept);
    slot->box_labels.clear();
    slot->crowd.clear();
    for (const int kept : boxes.kept_indices) {
      slot->box_labels.push_back(sample.box_labels[static_cast<size_t>(kept)]);
      slot->crowd.push_back(sample.crowd[static_cast<size_t>(kept)]);
    }
  }
  if (!status.ok() && FirstReport(/*failure=*/true, index)) {
    LogWarning("sample %d (%s) failed: %s", index, dataset_.sample(static_cast<size_t>(index)).path,
               status.ToString());
  }
  return status;
}

std::vector<SlotResult> BatchAssembler::Assemble(const BatchRequestSpec& request,
                                                 const BatchDestination& destination,
                                                 StageSeconds* seconds) const {
  if (dataset_.synthetic()) {
    std::memset(destination.images, kSyntheticPixel, request.indices.size() * image_bytes());
    return SyntheticSlots(request.indices);
  }
  std::vector<SlotResult> slots;
  slots.reserve(request.indices.size());
  for (size_t slot = 0; slot < request.indices.size(); ++slot) {
    slots.push_back(AssembleSlot(request, slot, destination, seconds));
  }
  return slots;
}

SlotResult BatchAssembler::AssembleSlot(const BatchRequestSpec& request, size_t slot,
                                        const BatchDestination& destination,
                                        StageSeconds* seconds) const {
  const int64_t index = request.indices[slot];
  uint8_t* image = destination.images + slot * image_bytes();
  // Where each group of the sample's views goes (one group: its image).
  std::vector<uint8_t*> views = {image};
  const std::vector<ViewGroupShape>& groups = pipeline_.view_groups();
  for (size_t g = 1; g < groups.size(); ++g) {
    views.push_back(destination.more_views[g - 1] + slot * groups[g].bytes());
  }
  uint8_t* mask = mask_ids_ == MaskIds::kNone ? nullptr : destination.masks + slot * mask_bytes();
  SlotResult result{index, dataset_.sample(static_cast<size_t>(index)).label, SampleOutcome::kOk,
                    index};
  if (dataset_.synthetic()) {
    std::memset(image, kSyntheticPixel, image_bytes());
    return result;
  }
  const absl::Status loaded = LoadSample(request, index, views, mask, seconds, &result);
  if (loaded.ok()) {
    return result;
  }
  if (absl::IsCancelled(loaded)) {
    result.outcome = SampleOutcome::kAbandoned;
    return result;
  }
  result.failure = DescribeFailure(dataset_.sample(static_cast<size_t>(index)).path, loaded);
  for (const int64_t candidate :
       ReplacementCandidates(request.seed, request.epoch, index, dataset_.size())) {
    const absl::Status replaced = LoadSample(request, candidate, views, mask, seconds, &result);
    if (absl::IsCancelled(replaced)) {
      result.outcome = SampleOutcome::kAbandoned;
      return result;
    }
    if (replaced.ok()) {
      result.outcome = SampleOutcome::kReplaced;
      result.label = dataset_.sample(static_cast<size_t>(candidate)).label;
      result.source = candidate;
      return result;
    }
  }
  result.outcome = SampleOutcome::kZeroFilled;
  result.label = kUnfilledLabel;
  result.source = -1;
  for (size_t g = 0; g < groups.size(); ++g) {
    std::memset(views[g], 0, groups[g].bytes());
  }
  // A loss ignores the zero image's pixels rather than learning them as a
  // class.
  const int ignore = pipeline_.options().mask_ignore_index;
  if (mask_ids_ == MaskIds::kUint8) {
    std::memset(mask, ignore, mask_bytes());
  } else if (mask_ids_ == MaskIds::kInt32) {
    std::fill_n(reinterpret_cast<int32_t*>(mask), mask_bytes() / sizeof(int32_t), ignore);
  }
  return result;
}

std::vector<SlotResult> BatchAssembler::SyntheticSlots(absl::Span<const int64_t> indices) const {
  std::vector<SlotResult> slots;
  slots.reserve(indices.size());
  for (const int64_t index : indices) {
    slots.push_back(
        {index, dataset_.sample(static_cast<size_t>(index)).label, SampleOutcome::kOk, index});
  }
  return slots;
}

int64_t BatchAssembler::distinct_failed_samples() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(reported_failures_.size());
}

}  // namespace heterodl
