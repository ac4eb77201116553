#include "src/common/proto_json.h"

#include <cstdint>

#include "absl/strings/numbers.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace heterodl {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using Json = nlohmann::ordered_json;

// proto3's JSON writes 64-bit integers as strings (JavaScript's doubles hold
// 53 bits); heterodl's are counts and sizes, and a count that jq or a
// dashboard must convert is a trap. Every such field of `descriptor` in
// `json` (its JSON, parsed in order) becomes a number, in nested messages
// and lists too.
void CountsAsNumbers(const Descriptor& descriptor, Json& json) {
  if (!json.is_object()) {
    return;
  }
  for (int i = 0; i < descriptor.field_count(); ++i) {
    const FieldDescriptor& field = *descriptor.field(i);
    auto it = json.find(field.name());
    if (it == json.end() || field.is_map()) {
      continue;
    }
    const auto convert = [&](Json& item) {
      if (field.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        CountsAsNumbers(*field.message_type(), item);
        return;
      }
      if (!item.is_string()) {
        return;
      }
      const std::string& text = item.get_ref<const std::string&>();
      if (field.cpp_type() == FieldDescriptor::CPPTYPE_INT64) {
        int64_t number = 0;
        if (absl::SimpleAtoi(text, &number)) {
          item = number;
        }
      } else if (field.cpp_type() == FieldDescriptor::CPPTYPE_UINT64) {
        uint64_t number = 0;
        if (absl::SimpleAtoi(text, &number)) {
          item = number;
        }
      }
    };
    if (field.is_repeated() && it->is_array()) {
      for (Json& item : *it) {
        convert(item);
      }
    } else {
      convert(*it);
    }
  }
}

}  // namespace

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string json;
  // Printing a valid message cannot fail; there is no input to reject.
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  Json parsed = Json::parse(json, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    return json;
  }
  CountsAsNumbers(*message.GetDescriptor(), parsed);
  return parsed.dump();
}

}  // namespace heterodl
