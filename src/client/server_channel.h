// How the dnn group's processes reach a data server: one gRPC channel per
// connection, with TLS, message limits and the shared token applied the same
// way by the loader, shutdown signalling and status queries.
//
//   ChannelSettings settings;
//   settings.tls = options.tls;
//   ASSIGN_OR_RETURN(auto channel, MakeServerChannel("algo-2:50051", settings));
//   grpc::ClientContext context;
//   AddAuthToken(context, token);
#ifndef HETERODL_SRC_CLIENT_SERVER_CHANNEL_H_
#define HETERODL_SRC_CLIENT_SERVER_CHANNEL_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "src/common/net/tls_config.h"

namespace heterodl {

struct ChannelSettings {
  TlsConfig tls;
  // The largest message accepted from the server (a batch with its header,
  // on the gRPC path); gRPC refuses larger ones before buffering them.
  uint64_t max_receive_bytes = 4 << 20;
  // Channels with different numbers get their own subchannel, so their own
  // TCP connection: gRPC would otherwise share one among channels to the
  // same address.
  int connection = 0;
};

// A channel to `address` (host:port or any gRPC target). Errors name the TLS
// file that cannot be read.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeServerChannel(const std::string& address,
                                                                 const ChannelSettings& settings);

// Every call to a server carries the token when the servers require one
// (empty: none).
void AddAuthToken(grpc::ClientContext& context, const std::string& token);

}  // namespace heterodl

#endif  // HETERODL_SRC_CLIENT_SERVER_CHANNEL_H_
