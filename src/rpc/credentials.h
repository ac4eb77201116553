// gRPC credentials from a TlsConfig (src/common/net/tls_config.h): insecure when
// it is empty, TLS (mutual with a CA on the server) otherwise. Errors name the
// file that is missing or unreadable, or the half of a pair that is.
#ifndef HETERODL_SRC_RPC_CREDENTIALS_H_
#define HETERODL_SRC_RPC_CREDENTIALS_H_

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <memory>

#include "absl/status/statusor.h"
#include "src/common/net/tls_config.h"

namespace heterodl {

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsConfig& tls);

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsConfig& tls);

// Adds the TLS name override (tls.server_name) to channel arguments.
void AddTlsChannelArguments(const TlsConfig& tls, grpc::ChannelArguments& arguments);

}  // namespace heterodl

#endif  // HETERODL_SRC_RPC_CREDENTIALS_H_
