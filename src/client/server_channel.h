// How the dnn group's processes reach data servers: gRPC channels with TLS,
// message limits and the shared token applied the same way by the loader,
// shutdown signalling and status queries. The credentials are made once (TLS
// files read and checked then) and shared by every channel opened with them.
//
//   ASSIGN_OR_RETURN(ServerChannels channels, ServerChannels::Create(options.tls));
//   std::shared_ptr<grpc::Channel> channel = channels.Open("algo-2:50051");
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

class ServerChannels {
 public:
  // `max_receive_bytes`: the largest message accepted from a server (a batch
  // with its header, on the gRPC path); gRPC refuses larger ones before
  // buffering them. Errors name the TLS file that cannot be read.
  static absl::StatusOr<ServerChannels> Create(const TlsConfig& tls,
                                               uint64_t max_receive_bytes = 4 << 20);

  // A channel to `address` (host:port or any gRPC target). Channels with
  // different `connection` numbers get their own subchannel, so their own
  // TCP connection: gRPC would otherwise share one among channels to the
  // same address.
  std::shared_ptr<grpc::Channel> Open(const std::string& address, int connection = 0) const;

 private:
  ServerChannels(std::shared_ptr<grpc::ChannelCredentials> credentials,
                 const grpc::ChannelArguments& arguments)
      : credentials_(std::move(credentials)), arguments_(arguments) {}

  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  grpc::ChannelArguments arguments_;
};

// Every call to a server carries the token when the servers require one
// (empty: none).
void AddAuthToken(grpc::ClientContext& context, const std::string& token);

}  // namespace heterodl

#endif  // HETERODL_SRC_CLIENT_SERVER_CHANNEL_H_
