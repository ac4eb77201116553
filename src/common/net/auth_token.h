// The shared secret that data servers require of their clients
// (--auth-token-file). It travels in the call metadata of every RPC.
#ifndef HETERODL_SRC_COMMON_NET_AUTH_TOKEN_H_
#define HETERODL_SRC_COMMON_NET_AUTH_TOKEN_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace heterodl {

// gRPC metadata key of the token.
inline constexpr char kAuthTokenMetadataKey[] = "x-heterodl-token";

// Reads a token file: its contents without surrounding whitespace. Errors name
// the file when it is unreadable, empty, longer than 4096 bytes, or holds
// characters that metadata cannot carry (only printable ASCII is allowed).
absl::StatusOr<std::string> ReadAuthTokenFile(const std::string& path);

// Compares in time that depends only on the lengths, so a client cannot find
// the token byte by byte from response times.
bool TokensEqual(absl::string_view expected, absl::string_view given);

}  // namespace heterodl

#endif  // HETERODL_SRC_COMMON_NET_AUTH_TOKEN_H_
