#include "src/wire/sample_structure.h"

namespace heterodl {

bool IsLabelledImages(const v1::SampleNode& structure,
                      const google::protobuf::RepeatedPtrField<v1::FieldSpec>& fields) {
  const bool pair =
      (structure.kind() == v1::SampleNode::LIST ||
       structure.kind() == v1::SampleNode::NAMEDTUPLE) &&
      structure.items_size() == 2 && structure.items(0).kind() == v1::SampleNode::FIELD &&
      structure.items(0).field() == 0 && structure.items(1).kind() == v1::SampleNode::FIELD &&
      structure.items(1).field() == 1;
  if (!pair || fields.size() != 2) {
    return false;
  }
  const v1::FieldSpec& image = fields[0];
  const v1::FieldSpec& label = fields[1];
  return image.dtype() == v1::DTYPE_UINT8 && !image.ragged() && !image.collated() &&
         image.shape_size() == 3 && image.shape(2) == 3 && label.dtype() == v1::DTYPE_INT64 &&
         !label.ragged() && !label.collated() && label.shape_size() == 0;
}

}  // namespace heterodl
