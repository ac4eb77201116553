// One JSON format for every document heterodl prints (cluster view, metrics,
// benchmark reports): protobuf's JSON printer, field names as in the .proto,
// every field present even at its default value.
#ifndef HETERODL_SRC_COMMON_PROTO_JSON_H_
#define HETERODL_SRC_COMMON_PROTO_JSON_H_

#include <string>

#include "google/protobuf/message.h"

namespace heterodl {

std::string ToJson(const google::protobuf::Message& message);

}  // namespace heterodl

#endif  // HETERODL_SRC_COMMON_PROTO_JSON_H_
