// CheckBatchHeader: what a loader accepts of a batch header before it reads
// a byte of the batch's pixels.
//
// A data server (or anything on the path of a plaintext pixel channel) must
// not be able to make a trainer allocate, wait for or misread what its own
// epoch plan does not hold: the header's sample indices must be the plan's,
// its counts must agree, its shape must be sane, and the bytes of pixels it
// announces must be the shape's and within the loader's limit.
//
//   ASSIGN_OR_RETURN(const uint64_t bytes,
//                    CheckBatchHeader(header, plan, rank, info.fields(), max_batch_bytes));
#ifndef HETERODL_SRC_CLIENT_BATCH_CHECK_H_
#define HETERODL_SRC_CLIENT_BATCH_CHECK_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "heterodl/data_service.pb.h"
#include "src/client/feed_schedule.h"
#include "src/plan/epoch_plan.h"

namespace heterodl {

// Sides larger than this are refused whatever the byte limit.
inline constexpr uint32_t kMaxImageSide = 1 << 16;

// The bytes of payload batch `header.id()` carries: its `fields` (the
// servers' DatasetInfo.fields) laid out for its samples and ragged lengths
// (src/wire/batch_layout.h); with images alone, samples x height x width x
// 3. DATA_LOSS naming the batch when the header's indices differ from
// `plan`'s for `rank`, when labels, indices and statuses are not one per
// sample, when it is not 3 channels or its images' shape is not the
// declared one, when more are failed than there are samples, when its
// ragged lengths do not fit the fields, or when a pixel channel byte count
// (images_on_channel) is not the payload's size. FAILED_PRECONDITION when
// the payload is over `max_batch_bytes` (every server would build it so:
// the loader's limit or the pipeline must change).
// REQUIRES: the header's rank and index name a batch of the plan (the
// loader asked for it); CheckFieldSpecs(fields) is OK.
// `user_fields`: the fields are a user's own Python dataset's
// (DatasetInfo.sample_structure), which say their shapes themselves: the
// header names no image size.
absl::StatusOr<uint64_t> CheckBatchHeader(
    const v1::Batch& header, const EpochPlan& plan, uint32_t rank,
    const google::protobuf::RepeatedPtrField<v1::FieldSpec>& fields, uint64_t max_batch_bytes,
    bool user_fields = false);

// The header's timing fields, with what cannot be (negative, NaN, infinite)
// read as zero.
ServerTiming TimingOf(const v1::Batch& header);

}  // namespace heterodl

#endif  // HETERODL_SRC_CLIENT_BATCH_CHECK_H_
