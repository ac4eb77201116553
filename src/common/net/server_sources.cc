#include "src/common/net/server_sources.h"

#include "absl/strings/str_cat.h"
#include "src/common/net/host_port.h"

namespace heterodl {

absl::Status ValidateServerSources(const ServerSources& sources) {
  if (sources.empty()) {
    return absl::InvalidArgumentError(
        "no data servers given (a list, a servers file or a DNS name)");
  }
  for (const std::string& address : sources.fixed) {
    if (absl::Status valid = SplitServerAddress(address).status(); !valid.ok()) {
      return valid;
    }
  }
  if (!sources.dns_name.empty()) {
    if (absl::Status valid = SplitServerAddress(sources.dns_name).status(); !valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the data servers' DNS name: ", valid.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace heterodl
