#include "src/rpc/peer_host.h"

#include "absl/strings/match.h"

namespace heterodl {

std::string PeerHost(absl::string_view peer) {
  if (!absl::StartsWith(peer, "ipv4:") && !absl::StartsWith(peer, "ipv6:")) {
    return std::string(peer);
  }
  const size_t colon = peer.rfind(':');
  // An IPv6 address has colons of its own: the port's is after its ']'.
  const size_t bracket = peer.rfind(']');
  if (colon <= 4 || (bracket != absl::string_view::npos && colon < bracket)) {
    return std::string(peer);
  }
  return std::string(peer.substr(0, colon));
}

}  // namespace heterodl
