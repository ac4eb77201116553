#include "src/rpc/grpc_logging.h"

#include <grpc/support/log.h>

#include "src/common/log.h"

namespace heterodl {
namespace {

void LogGrpcLine(gpr_log_func_args* args) {
  const absl::string_view message = args->message == nullptr ? "" : args->message;
  const std::string headline = GrpcLogHeadline(message);
  if (args->severity == GPR_LOG_SEVERITY_ERROR) {
    LogWarning("gRPC: %s", headline);
  } else {
    LogDebug("gRPC: %s", headline);
  }
  if (headline.size() < message.size()) {
    LogDebug("gRPC (%s:%d): %s", args->file, args->line, message);
  }
}

}  // namespace

std::string GrpcLogHeadline(absl::string_view message) {
  return std::string(message.substr(0, message.find(" {")));
}

void RouteGrpcLogsToOurs() { gpr_set_log_function(&LogGrpcLine); }

}  // namespace heterodl
