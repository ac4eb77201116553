// What a user's own Python dataset's samples look like (DatasetInfo's
// sample_structure and fields), as far as both ends must agree on it.
//
//   if (IsLabelledImages(info.sample_structure(), info.fields())) {
//     // a classification dataset: Batch.labels holds its labels
//   }
#ifndef HETERODL_SRC_WIRE_SAMPLE_STRUCTURE_H_
#define HETERODL_SRC_WIRE_SAMPLE_STRUCTURE_H_

#include "google/protobuf/repeated_ptr_field.h"
#include "heterodl/data_service.pb.h"

namespace heterodl {

// Whether samples are (image, label) as heterodl's own classification
// batches hold them: a tuple, list or namedtuple of exactly an image uint8
// [H, W, 3] (field 0) and an int64 scalar label (field 1). The server then
// also puts the labels in Batch.labels and the image size in Batch.height
// and width, so what trains on classification batches (heterodl train,
// bench feed) takes these as they are; the payload is unchanged.
bool IsLabelledImages(const v1::SampleNode& structure,
                      const google::protobuf::RepeatedPtrField<v1::FieldSpec>& fields);

}  // namespace heterodl

#endif  // HETERODL_SRC_WIRE_SAMPLE_STRUCTURE_H_
