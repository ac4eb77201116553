// ServerSources: where a loader finds its data servers, the one type every
// option struct and command uses for it (src/client/server_discovery.h
// follows them while a run goes on).
//
//   ServerSources servers;
//   servers.fixed = {"algo-2:50051", "algo-3:50051"};  // and/or
//   servers.servers_file = "/shared/data-servers";     // re-read when it changes
//   servers.dns_name = "heterodl-data:50051";          // every address a server
#ifndef HETERODL_SRC_COMMON_NET_SERVER_SOURCES_H_
#define HETERODL_SRC_COMMON_NET_SERVER_SOURCES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace heterodl {

struct ServerSources {
  std::vector<std::string> fixed;  // host:port
  std::string servers_file;
  std::string dns_name;  // host:port; the host's every address is a server
  // Whether the set can change during a run.
  bool dynamic() const { return !servers_file.empty() || !dns_name.empty(); }
  // No source at all.
  bool empty() const { return fixed.empty() && !dynamic(); }
};

// INVALID_ARGUMENT naming the entry: no source at all, or an address (fixed,
// or the DNS name) that is not host:port.
absl::Status ValidateServerSources(const ServerSources& sources);

}  // namespace heterodl

#endif  // HETERODL_SRC_COMMON_NET_SERVER_SOURCES_H_
