#include "src/common/net/auth_token.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "src/common/read_file.h"
#include "src/common/status_macros.h"

namespace heterodl {

absl::StatusOr<std::string> ReadAuthTokenFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string contents, ReadFileToString(path));
  const std::string token(absl::StripAsciiWhitespace(contents));
  if (token.empty() || token.size() > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("auth token file '", path, "' must hold 1 to 4096 characters"));
  }
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          "auth token file '", path, "' holds a character other than printable ASCII"));
    }
  }
  return token;
}

bool TokensEqual(absl::string_view expected, absl::string_view given) {
  if (expected.size() != given.size()) {
    return false;
  }
  unsigned char difference = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    difference |= static_cast<unsigned char>(expected[i] ^ given[i]);
  }
  return difference == 0;
}

}  // namespace heterodl
