#include "src/wire/batch_layout.h"

#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace heterodl {
namespace {

bool IsFieldName(const std::string& name) {
  if (name.empty() || name.size() > 64 || name[0] < 'a' || name[0] > 'z') {
    return false;
  }
  for (const char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
      return false;
    }
  }
  return true;
}

uint64_t AlignUp(uint64_t offset) {
  return (offset + kFieldAlignment - 1) / kFieldAlignment * kFieldAlignment;
}

// The element type of a known `dtype`; nullopt for DTYPE_UNSPECIFIED or an
// unknown value.
std::optional<ElementType> KnownElementType(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_UINT8:
      return ElementType::kUInt8;
    case v1::DTYPE_INT32:
      return ElementType::kInt32;
    case v1::DTYPE_INT64:
      return ElementType::kInt64;
    case v1::DTYPE_FLOAT32:
      return ElementType::kFloat32;
    case v1::DTYPE_BOOL:
      return ElementType::kBool;
    case v1::DTYPE_INT8:
      return ElementType::kInt8;
    case v1::DTYPE_INT16:
      return ElementType::kInt16;
    case v1::DTYPE_FLOAT16:
      return ElementType::kFloat16;
    case v1::DTYPE_FLOAT64:
      return ElementType::kFloat64;
    default:
      return std::nullopt;
  }
}

}  // namespace

uint64_t DTypeBytes(v1::DType dtype) {
  const std::optional<ElementType> type = KnownElementType(dtype);
  return type ? ElementBytes(*type) : 0;
}

std::string DTypeName(v1::DType dtype) {
  const std::optional<ElementType> type = KnownElementType(dtype);
  return type ? ElementTypeName(*type) : absl::StrCat("unknown dtype ", static_cast<int>(dtype));
}

std::string DescribeField(const v1::FieldSpec& field) {
  std::vector<std::string> dimensions;
  if (field.ragged()) {
    dimensions.push_back("n");
  }
  for (size_t d = field.collated() ? 1 : 0; d < static_cast<size_t>(field.shape_size()); ++d) {
    dimensions.push_back(absl::StrCat(field.shape(static_cast<int>(d))));
  }
  if (field.collated()) {
    dimensions.insert(dimensions.begin(), "B");
  }
  return absl::StrCat(field.name(), " ", DTypeName(field.dtype()), " [",
                      absl::StrJoin(dimensions, ", "), "]",
                      field.ragged()     ? " (ragged)"
                      : field.collated() ? " (collated: each batch its own shape)"
                                         : "");
}

ElementType ElementTypeOfDType(v1::DType dtype) {
  return KnownElementType(dtype).value_or(ElementType::kUInt8);
}

absl::Status CheckFieldSpecs(const google::protobuf::RepeatedPtrField<v1::FieldSpec>& fields) {
  if (fields.empty() || fields.size() > kMaxFields) {
    return absl::InvalidArgumentError(
        absl::StrCat(fields.size(), " batch fields (1 to ", kMaxFields, " may be)"));
  }
  std::set<std::string> names;
  for (const v1::FieldSpec& field : fields) {
    if (!IsFieldName(field.name())) {
      return absl::InvalidArgumentError(absl::StrCat("batch field name '",
                                                     field.name().substr(0, 64),
                                                     "' is not [a-z][a-z0-9_]* of 64 bytes"));
    }
    if (!names.insert(field.name()).second) {
      return absl::InvalidArgumentError(absl::StrCat("batch field '", field.name(), "' twice"));
    }
    if (DTypeBytes(field.dtype()) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch field '", field.name(), "' has ", DTypeName(field.dtype())));
    }
    if (field.shape_size() > kMaxFieldRank) {
      return absl::InvalidArgumentError(absl::StrCat("batch field '", field.name(), "' has ",
                                                     field.shape_size(), " dimensions (at most ",
                                                     kMaxFieldRank, ")"));
    }
    if (field.ragged() && field.collated()) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch field '", field.name(), "' is both ragged and collated"));
    }
    for (const uint32_t dimension : field.shape()) {
      // A collated field's shape is one batch's, where a dimension may be
      // empty (a batch whose samples have no boxes).
      if ((dimension == 0 && !field.collated()) || dimension > kMaxFieldDimension) {
        return absl::InvalidArgumentError(absl::StrCat("batch field '", field.name(),
                                                       "' has a dimension of ", dimension,
                                                       " (1 to ", kMaxFieldDimension, ")"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<BatchLayout> LayOutBatch(
    const google::protobuf::RepeatedPtrField<v1::FieldSpec>& fields, uint32_t samples,
    const google::protobuf::RepeatedPtrField<v1::RaggedLengths>& ragged_lengths,
    const google::protobuf::RepeatedPtrField<v1::FieldShape>& collated_shapes, uint64_t max_bytes) {
  BatchLayout layout;
  int next_ragged = 0;
  int next_collated = 0;
  // Sizes are checked against `max_bytes` as they grow, in 128-bit
  // arithmetic: a forged count cannot wrap them round.
  unsigned __int128 offset = 0;
  for (const v1::FieldSpec& spec : fields) {
    FieldSlice slice;
    slice.name = spec.name();
    slice.dtype = ElementTypeOfDType(spec.dtype());
    slice.ragged = spec.ragged();
    uint64_t rows = samples;
    if (spec.ragged()) {
      if (next_ragged >= ragged_lengths.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("no lengths for ragged batch field '", spec.name(), "'"));
      }
      const v1::RaggedLengths& lengths = ragged_lengths[next_ragged++];
      if (static_cast<uint32_t>(lengths.lengths_size()) != samples) {
        return absl::InvalidArgumentError(absl::StrCat("ragged batch field '", spec.name(),
                                                       "' has ", lengths.lengths_size(),
                                                       " lengths for ", samples, " samples"));
      }
      rows = 0;
      for (const uint32_t length : lengths.lengths()) {
        if (length > kMaxRaggedLength) {
          return absl::InvalidArgumentError(
              absl::StrCat("ragged batch field '", spec.name(), "' has a sample of ", length,
                           " elements (at most ", kMaxRaggedLength, ")"));
        }
        rows += length;
      }
      slice.lengths.assign(lengths.lengths().begin(), lengths.lengths().end());
    }
    unsigned __int128 bytes = DTypeBytes(spec.dtype());
    const google::protobuf::RepeatedField<uint32_t>* dimensions = &spec.shape();
    if (spec.collated()) {
      if (next_collated >= collated_shapes.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("no shape for collated batch field '", spec.name(), "'"));
      }
      dimensions = &collated_shapes[next_collated++].dims();
      if (dimensions->size() != spec.shape_size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("collated batch field '", spec.name(), "' has ", dimensions->size(),
                         " dimensions in this batch and ", spec.shape_size(), " in the dataset's"));
      }
    } else {
      bytes *= rows;
      slice.shape.push_back(static_cast<int64_t>(rows));
    }
    for (const uint32_t dimension : *dimensions) {
      bytes *= dimension;
      slice.shape.push_back(dimension);
      if (bytes > max_bytes) {
        break;  // reported below, before the product can grow further
      }
    }
    offset = AlignUp(static_cast<uint64_t>(offset));
    if (bytes > max_bytes || offset + bytes > max_bytes) {
      return absl::FailedPreconditionError(absl::StrCat("a batch of ", samples,
                                                        " samples would be more than ", max_bytes,
                                                        " bytes (at field '", spec.name(),
                                                        "'), over the loader's limit "
                                                        "(RemoteLoaderOptions::max_batch_bytes)"));
    }
    slice.offset = static_cast<uint64_t>(offset);
    slice.bytes = static_cast<uint64_t>(bytes);
    offset += bytes;
    layout.fields.push_back(std::move(slice));
  }
  if (next_ragged != ragged_lengths.size()) {
    return absl::InvalidArgumentError(absl::StrCat(ragged_lengths.size(), " ragged lengths for ",
                                                   next_ragged, " ragged batch fields"));
  }
  if (next_collated != collated_shapes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(collated_shapes.size(), " collated shapes for ",
                                                   next_collated, " collated batch fields"));
  }
  layout.payload_bytes = static_cast<uint64_t>(offset);
  return layout;
}

v1::FieldSpec ImagesField(uint32_t height, uint32_t width) {
  v1::FieldSpec field;
  field.set_name("images");
  field.set_dtype(v1::DTYPE_UINT8);
  field.add_shape(height);
  field.add_shape(width);
  field.add_shape(3);
  return field;
}

v1::FieldSpec ViewsField(uint32_t group, uint32_t count, uint32_t height, uint32_t width) {
  v1::FieldSpec field;
  field.set_name(absl::StrCat("views_", group));
  field.set_dtype(v1::DTYPE_UINT8);
  field.add_shape(count);
  field.add_shape(height);
  field.add_shape(width);
  field.add_shape(3);
  return field;
}

v1::FieldSpec MasksField(uint32_t height, uint32_t width, v1::DType dtype) {
  v1::FieldSpec field;
  field.set_name("masks");
  field.set_dtype(dtype);
  field.add_shape(height);
  field.add_shape(width);
  return field;
}

}  // namespace heterodl
