#include "src/client/server_channel.h"

#include <algorithm>
#include <limits>

#include "src/common/net/auth_token.h"
#include "src/common/status_macros.h"
#include "src/wire/credentials.h"

namespace heterodl {

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeServerChannel(const std::string& address,
                                                                 const ChannelSettings& settings) {
  ASSIGN_OR_RETURN(const std::shared_ptr<grpc::ChannelCredentials> credentials,
                   MakeChannelCredentials(settings.tls));
  grpc::ChannelArguments arguments;
  AddTlsChannelArguments(settings.tls, arguments);
  arguments.SetMaxReceiveMessageSize(static_cast<int>(std::min<uint64_t>(
      settings.max_receive_bytes, static_cast<uint64_t>(std::numeric_limits<int>::max()))));
  arguments.SetMaxSendMessageSize(4 << 20);
  // Reconnect quickly to a server that comes back.
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  arguments.SetInt("heterodl.connection", settings.connection);
  return grpc::CreateCustomChannel(address, credentials, arguments);
}

void AddAuthToken(grpc::ClientContext& context, const std::string& token) {
  if (!token.empty()) context.AddMetadata(kAuthTokenMetadataKey, token);
}

}  // namespace heterodl
