// KeepGrpcUntilExit(): gRPC for the whole life of a process.
//
// gRPC shuts itself down when its last object goes (grpc::Server's
// destructor calls grpc_shutdown()), and that shutdown joins its executor
// threads, one of which can be inside a poll of up to 10 s: seen as a data
// server that took 10 s longer to stop. A program calls this once in main(),
// after its signal handling is set up; the count it holds is never given
// back, so no destructor ever waits for gRPC, and the exit reclaims what
// gRPC holds.
#ifndef HETERODL_SRC_RPC_GRPC_LIFETIME_H_
#define HETERODL_SRC_RPC_GRPC_LIFETIME_H_

#include <grpc/grpc.h>

namespace heterodl {

inline void KeepGrpcUntilExit() { grpc_init(); }

}  // namespace heterodl

#endif  // HETERODL_SRC_RPC_GRPC_LIFETIME_H_
