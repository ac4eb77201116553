#include "src/common/proto_json.h"

#include "google/protobuf/util/json_util.h"

namespace heterodl {

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string json;
  // Printing a valid message cannot fail; there is no input to reject.
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

}  // namespace heterodl
