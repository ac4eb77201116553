// The host part of a gRPC peer string ("ipv4:10.0.0.7:51234" ->
// "ipv4:10.0.0.7"): what a server counts a client's share of its streams by.
// Every connection of one machine (or of one NAT, or of loopback) is the same
// host.
#ifndef HETERODL_SRC_RPC_PEER_HOST_H_
#define HETERODL_SRC_RPC_PEER_HOST_H_

#include <string>

#include "absl/strings/string_view.h"

namespace heterodl {

// `grpc_peer` less its port for "ipv4:" and "ipv6:" peers, brackets decoded
// ("ipv6:%5B::1%5D:5000" -> "ipv6:[::1]"); any other (a Unix socket's, an
// unknown form) unchanged.
std::string PeerHost(absl::string_view grpc_peer);

}  // namespace heterodl

#endif  // HETERODL_SRC_RPC_PEER_HOST_H_
