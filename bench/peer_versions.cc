#include "bench/peer_versions.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace heterodl {

std::string VersionLine(absl::string_view name, const v1::PeerResult& result) {
  if (result.versions().empty()) {
    return absl::StrCat(name, ": not reported");
  }
  std::vector<std::pair<std::string, std::string>> versions(result.versions().begin(),
                                                            result.versions().end());
  std::sort(versions.begin(), versions.end());
  return absl::StrCat(name, ": ",
                      absl::StrJoin(versions, ", ", [](std::string* out, const auto& version) {
                        absl::StrAppend(out, version.first, " ", version.second);
                      }));
}

}  // namespace heterodl
