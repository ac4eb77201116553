#include "src/common/host_port.h"

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace heterodl {

absl::StatusOr<HostPort> SplitHostPort(absl::string_view address) {
  const auto invalid = [address] {
    return absl::InvalidArgumentError(
        absl::StrCat("'", address, "' is not host:port (IPv6 literals in brackets)"));
  };
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) return invalid();
  absl::string_view host = address.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return invalid();
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != absl::string_view::npos) {
    return invalid();  // an IPv6 literal needs its brackets
  }
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return invalid();
  }
  return HostPort{std::string(host), port};
}

}  // namespace heterodl
