// ServerDiscovery: which data servers a loader uses, as it changes during a
// run. Three sources, used together:
//   - a fixed list (the cluster view's, from hostlist patterns), always in;
//   - a servers file: one host:port per line (or several, comma-separated;
//     '#' starts a comment), re-read whenever it changes, for any scheduler
//     or script that adds and removes data hosts (write a new file and
//     rename it over the old one, so no reader sees half of it);
//   - a DNS name with a port ("heterodl-data:50051"), each of whose
//     addresses is a server: a Kubernetes headless Service lists its ready
//     pods that way. Re-resolved on every Refresh().
//
//   ServerDiscovery discovery(sources);
//   std::vector<std::string> servers = discovery.Refresh();  // now
//   ... later: servers = discovery.Refresh();  // joined and left
//
// gRPC could resolve the name and balance over its addresses itself, but the
// loader must know each server apart: a batch is owed by one server, and a
// server that leaves gives back exactly what it owed.
//
// Not thread-safe: one owner calls Refresh().
#ifndef HETERODL_SRC_CLIENT_SERVER_DISCOVERY_H_
#define HETERODL_SRC_CLIENT_SERVER_DISCOVERY_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/common/net/server_sources.h"

namespace heterodl {

// The numeric addresses `host` resolves to (IPv6 ones without brackets),
// each once. NOT_FOUND when the name does not exist or has no address;
// UNAVAILABLE when the resolver failed (try again later).
using HostResolver = std::function<absl::StatusOr<std::vector<std::string>>(const std::string&)>;
// The system's resolver (getaddrinfo): /etc/hosts, then DNS.
HostResolver SystemHostResolver();

// A servers file's addresses, in file order, each once. A line that is not
// host:port is skipped with a warning naming the file and the line. NOT_FOUND
// when the file does not exist.
absl::StatusOr<std::vector<std::string>> ReadServersFile(const std::string& path);

class ServerDiscovery {
 public:
  explicit ServerDiscovery(ServerSources sources, HostResolver resolver = SystemHostResolver());

  // The servers now, sorted, each once. A source that cannot be read this
  // time (a missing file, a failed lookup) keeps the addresses it last gave:
  // a resolver's hiccup must not take every server away, and a server that
  // is really gone fails over on its own. Each new failure is logged once.
  std::vector<std::string> Refresh();

  const ServerSources& sources() const { return sources_; }

 private:
  void RefreshFile();
  void RefreshDns();
  // Logs `status` of `source` when it differs from the last one logged.
  void Note(std::string& last, const std::string& source, const absl::Status& status);

  const ServerSources sources_;
  const HostResolver resolver_;
  // The file as last read: when it changed (mtime, size, inode) and what
  // it named.
  struct FileVersion {
    int64_t mtime_ns = -1;
    int64_t size = -1;
    uint64_t inode = 0;
    bool SameAs(const FileVersion& other) const {
      return mtime_ns == other.mtime_ns && size == other.size && inode == other.inode;
    }
  };
  FileVersion file_version_;
  std::vector<std::string> from_file_;
  std::vector<std::string> from_dns_;
  std::string file_error_;
  std::string dns_error_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_CLIENT_SERVER_DISCOVERY_H_
