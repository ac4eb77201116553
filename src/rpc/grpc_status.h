// absl::Status <-> grpc::Status. The two share their codes (gRPC's canonical
// codes), so a conversion keeps code and message.
#ifndef HETERODL_SRC_RPC_GRPC_STATUS_H_
#define HETERODL_SRC_RPC_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace heterodl {

inline absl::Status FromGrpcStatus(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace heterodl

#endif  // HETERODL_SRC_RPC_GRPC_STATUS_H_
