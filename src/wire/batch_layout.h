// The batch contract: a batch is a set of named fields (DatasetInfo.fields),
// each an element type and a per-sample shape, dense or ragged (or, from a
// Python dataset's collate_fn, the whole batch's array), and its
// bytes are one payload that follows the batch header (inline in the gRPC
// message, on a pixel channel, or in shared memory: every transport carries
// the payload, whatever fields it holds). This file says where each field
// lies in the payload, from the specs and a header's counts alone, and
// checks both before anything is allocated: a server that claims a field
// size other than the specs make is refused.
//
//   RETURN_IF_ERROR(CheckFieldSpecs(info.fields()));            // at handshake
//   ASSIGN_OR_RETURN(BatchLayout layout,
//                    LayOutBatch(info.fields(), samples, header.ragged_lengths(),
//                                header.collated_shapes(), max_bytes));
//   // layout.payload_bytes: what to receive; layout.fields[i]: where field i is.
//
// Classification is the first instance: one field, images uint8 [H, W, 3];
// its payload is exactly the images, as before the contract.
#ifndef HETERODL_SRC_WIRE_BATCH_LAYOUT_H_
#define HETERODL_SRC_WIRE_BATCH_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "heterodl/data_service.pb.h"
#include "src/wire/field_slice.h"

namespace heterodl {

// Every field starts at a multiple of this in the payload, so a typed view
// of it is aligned for any element type and for vector loads.
inline constexpr uint64_t kFieldAlignment = 64;
// Bounds on what a server may declare.
inline constexpr int kMaxFields = 32;
inline constexpr int kMaxFieldRank = 6;
inline constexpr uint32_t kMaxFieldDimension = 1 << 16;
// A sample's list in a ragged field (a sample's boxes) holds at most this
// many elements.
inline constexpr uint32_t kMaxRaggedLength = 1 << 16;

// Bytes of one element of `dtype`; 0 for DTYPE_UNSPECIFIED or an unknown
// value.
uint64_t DTypeBytes(v1::DType dtype);
// "uint8", "int32", "int64", "float32" (NumPy's names).
std::string DTypeName(v1::DType dtype);

// A field as a log line names it, with a sample's shape: "images uint8 [224,
// 224, 3]"; a ragged one's list length as n ("boxes float32 [n, 4]
// (ragged)"); a collated one's batch as B ("tokens int64 [B, 12]
// (collated: each batch its own shape)").
std::string DescribeField(const v1::FieldSpec& field);

// The element type of a known `dtype` (CheckFieldSpecs: every field's is).
ElementType ElementTypeOfDType(v1::DType dtype);

struct BatchLayout {
  std::vector<FieldSlice> fields;  // in DatasetInfo.fields' order
  uint64_t payload_bytes = 0;
};

// INVALID_ARGUMENT naming the field and the reason unless: 1 to kMaxFields
// fields; names unique, [a-z][a-z0-9_]* of at most 64 bytes; dtypes known;
// at most kMaxFieldRank dimensions, each in [1, kMaxFieldDimension] (a
// collated field's may be 0); none both ragged and collated.
absl::Status CheckFieldSpecs(const google::protobuf::RepeatedPtrField<v1::FieldSpec>& fields);

// The layout of a batch of `samples` samples. `ragged_lengths` holds one
// entry per ragged field, in order, each with `samples` lengths of at most
// kMaxRaggedLength; `collated_shapes` one per collated field, in order, of
// its spec's rank (the field's whole array: no dimension of samples is
// added). INVALID_ARGUMENT when the lengths or shapes do not match the
// fields and samples; FAILED_PRECONDITION when the payload would pass
// `max_bytes`. REQUIRES: CheckFieldSpecs(fields) is OK.
absl::StatusOr<BatchLayout> LayOutBatch(
    const google::protobuf::RepeatedPtrField<v1::FieldSpec>& fields, uint32_t samples,
    const google::protobuf::RepeatedPtrField<v1::RaggedLengths>& ragged_lengths,
    const google::protobuf::RepeatedPtrField<v1::FieldShape>& collated_shapes, uint64_t max_bytes);

// The one field of a classification pipeline's batches: images uint8
// [height, width, 3].
v1::FieldSpec ImagesField(uint32_t height, uint32_t width);
// Group `group` of a multi-view pipeline's views: views_<group> uint8
// [count, height, width, 3].
v1::FieldSpec ViewsField(uint32_t group, uint32_t count, uint32_t height, uint32_t width);
// A segmentation pipeline's second field: masks of class ids, `dtype`
// (uint8 or int32) [height, width].
v1::FieldSpec MasksField(uint32_t height, uint32_t width, v1::DType dtype);

}  // namespace heterodl

#endif  // HETERODL_SRC_WIRE_BATCH_LAYOUT_H_
