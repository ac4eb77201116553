// gRPC's own log lines in heterodl's format.
//
// gRPC prints its errors to stderr as one long line with a tree of causes
// ("UNKNOWN:No address added out of total 1 resolved for '0.0.0.0:50051'
// {file:..., children:[...]}"). Routed here, such a line becomes a warning
// of ours with its first sentence, and the tree goes to --log-level debug;
// heterodl's own message about the same failure (which says what to do)
// follows it.
#ifndef HETERODL_SRC_RPC_GRPC_LOGGING_H_
#define HETERODL_SRC_RPC_GRPC_LOGGING_H_

#include <string>

#include "absl/strings/string_view.h"

namespace heterodl {

// Call once in main(), before gRPC logs anything.
void RouteGrpcLogsToOurs();

// A gRPC log message without its tree of causes: what precedes " {".
std::string GrpcLogHeadline(absl::string_view message);

}  // namespace heterodl

#endif  // HETERODL_SRC_RPC_GRPC_LOGGING_H_
