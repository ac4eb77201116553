// FieldSlice: where one field of a received batch lies in its payload, and
// what its elements are. Free of protobuf: LibTorch code includes it (via
// src/client/batch.h), and LibTorch's headers bring a protobuf of their own.
#ifndef HETERODL_SRC_WIRE_FIELD_SLICE_H_
#define HETERODL_SRC_WIRE_FIELD_SLICE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace heterodl {

// A field's element type (data_service.proto's DType, less UNSPECIFIED).
// The last five come only from a user's own Python dataset.
enum class ElementType {
  kUInt8,
  kInt32,
  kInt64,
  kFloat32,
  kBool,
  kInt8,
  kInt16,
  kFloat16,
  kFloat64
};

// Bytes of one element.
inline uint64_t ElementBytes(ElementType type) {
  switch (type) {
    case ElementType::kUInt8:
    case ElementType::kBool:
    case ElementType::kInt8:
      return 1;
    case ElementType::kInt16:
    case ElementType::kFloat16:
      return 2;
    case ElementType::kInt32:
    case ElementType::kFloat32:
      return 4;
    case ElementType::kInt64:
    case ElementType::kFloat64:
      return 8;
  }
  return 1;
}

// NumPy's name: "uint8", "int32", "int64", "float32", "bool", ...
inline const char* ElementTypeName(ElementType type) {
  switch (type) {
    case ElementType::kUInt8:
      return "uint8";
    case ElementType::kInt32:
      return "int32";
    case ElementType::kInt64:
      return "int64";
    case ElementType::kFloat32:
      return "float32";
    case ElementType::kBool:
      return "bool";
    case ElementType::kInt8:
      return "int8";
    case ElementType::kInt16:
      return "int16";
    case ElementType::kFloat16:
      return "float16";
    case ElementType::kFloat64:
      return "float64";
  }
  return "uint8";
}

// The element type of each C type a field can hold, for typed views.
template <typename T>
struct ElementTypeOf;
template <>
struct ElementTypeOf<uint8_t> {
  static constexpr ElementType kValue = ElementType::kUInt8;
};
template <>
struct ElementTypeOf<int32_t> {
  static constexpr ElementType kValue = ElementType::kInt32;
};
template <>
struct ElementTypeOf<int64_t> {
  static constexpr ElementType kValue = ElementType::kInt64;
};
template <>
struct ElementTypeOf<float> {
  static constexpr ElementType kValue = ElementType::kFloat32;
};
template <>
struct ElementTypeOf<int8_t> {
  static constexpr ElementType kValue = ElementType::kInt8;
};
template <>
struct ElementTypeOf<int16_t> {
  static constexpr ElementType kValue = ElementType::kInt16;
};
template <>
struct ElementTypeOf<double> {
  static constexpr ElementType kValue = ElementType::kFloat64;
};
template <>
struct ElementTypeOf<bool> {
  static constexpr ElementType kValue = ElementType::kBool;
};

struct FieldSlice {
  std::string name;
  ElementType dtype = ElementType::kUInt8;
  // The field's array: [samples, *spec.shape] when dense, [elements of all
  // samples, *spec.shape] when ragged, the batch's own shape when collated.
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // from the payload's start, a multiple of kFieldAlignment
  uint64_t bytes = 0;
  // Ragged fields: how many elements each sample has, in sample order.
  bool ragged = false;
  std::vector<uint32_t> lengths;

  // Bytes of one row of `shape`: one sample's of a dense field, one
  // element's of a ragged one; 0 when the field has no rows.
  uint64_t row_bytes() const {
    return shape.empty() || shape[0] == 0 ? 0 : bytes / static_cast<uint64_t>(shape[0]);
  }
};

}  // namespace heterodl

#endif  // HETERODL_SRC_WIRE_FIELD_SLICE_H_
