#include "src/client/server_channel.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "src/common/net/auth_token.h"
#include "src/common/status_macros.h"
#include "src/rpc/credentials.h"

namespace heterodl {

absl::StatusOr<ServerChannels> ServerChannels::Create(const TlsConfig& tls,
                                                      uint64_t max_receive_bytes) {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                   MakeChannelCredentials(tls));
  grpc::ChannelArguments arguments;
  AddTlsChannelArguments(tls, arguments);
  arguments.SetMaxReceiveMessageSize(static_cast<int>(std::min<uint64_t>(
      max_receive_bytes, static_cast<uint64_t>(std::numeric_limits<int>::max()))));
  arguments.SetMaxSendMessageSize(4 << 20);
  // Reconnect quickly to a server that comes back.
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return ServerChannels(std::move(credentials), arguments);
}

std::shared_ptr<grpc::Channel> ServerChannels::Open(const std::string& address,
                                                    int connection) const {
  grpc::ChannelArguments arguments = arguments_;
  arguments.SetInt("heterodl.connection", connection);
  return grpc::CreateCustomChannel(address, credentials_, arguments);
}

void AddAuthToken(grpc::ClientContext& context, const std::string& token) {
  if (!token.empty()) {
    context.AddMetadata(kAuthTokenMetadataKey, token);
  }
}

}  // namespace heterodl
