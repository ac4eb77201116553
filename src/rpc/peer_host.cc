#include "src/rpc/peer_host.h"

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"

namespace heterodl {

std::string PeerHost(absl::string_view grpc_peer) {
  if (!absl::StartsWith(grpc_peer, "ipv4:") && !absl::StartsWith(grpc_peer, "ipv6:")) {
    return std::string(grpc_peer);
  }
  // gRPC writes a peer as a URI: "ipv6:%5B::1%5D:5000".
  const std::string decoded =
      absl::StrReplaceAll(grpc_peer, {{"%5B", "["}, {"%5D", "]"}, {"%25", "%"}});
  const absl::string_view peer = decoded;
  const size_t colon = peer.rfind(':');
  // An IPv6 address has colons of its own: the port's is after its ']'.
  const size_t bracket = peer.rfind(']');
  if (colon <= 4 || (bracket != absl::string_view::npos && colon < bracket)) {
    return std::string(peer);
  }
  return std::string(peer.substr(0, colon));
}

}  // namespace heterodl
