#include "src/client/server_discovery.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "src/common/log.h"
#include "src/common/net/host_port.h"
#include "src/common/read_file.h"

namespace heterodl {
namespace {

void AddUnique(std::vector<std::string>& to, const std::string& address) {
  if (std::find(to.begin(), to.end(), address) == to.end()) {
    to.push_back(address);
  }
}

}  // namespace

HostResolver SystemHostResolver() {
  return [](const std::string& host) -> absl::StatusOr<std::vector<std::string>> {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int error = getaddrinfo(host.c_str(), nullptr, &hints, &found);
    if (error != 0) {
      const std::string why = error == EAI_SYSTEM ? std::strerror(errno) : gai_strerror(error);
      const std::string message = absl::StrCat("cannot resolve '", host, "': ", why);
      if (error == EAI_NONAME || error == EAI_NODATA) {
        return absl::NotFoundError(message);
      }
      return absl::UnavailableError(message);
    }
    std::vector<std::string> addresses;
    for (const addrinfo* entry = found; entry != nullptr; entry = entry->ai_next) {
      char text[NI_MAXHOST];
      if (getnameinfo(entry->ai_addr, entry->ai_addrlen, text, sizeof(text), nullptr, 0,
                      NI_NUMERICHOST) == 0) {
        AddUnique(addresses, text);
      }
    }
    freeaddrinfo(found);
    if (addresses.empty()) {
      return absl::NotFoundError(absl::StrCat("'", host, "' has no address"));
    }
    return addresses;
  };
}

absl::StatusOr<std::vector<std::string>> ReadServersFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    return text.status();
  }
  std::vector<std::string> addresses;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    ++line_number;
    line = line.substr(0, line.find('#'));
    for (absl::string_view entry : absl::StrSplit(line, ',')) {
      entry = absl::StripAsciiWhitespace(entry);
      if (entry.empty()) {
        continue;
      }
      if (const absl::Status valid = SplitServerAddress(entry).status(); !valid.ok()) {
        LogWarning("%s:%d: %s; skipped", path, line_number, valid.message());
        continue;
      }
      AddUnique(addresses, std::string(entry));
    }
  }
  return addresses;
}

ServerDiscovery::ServerDiscovery(ServerSources sources, HostResolver resolver)
    : sources_(std::move(sources)), resolver_(std::move(resolver)) {}

void ServerDiscovery::Note(std::string& last, const std::string& source,
                           const absl::Status& status) {
  const std::string now = status.ok() ? "" : std::string(status.message());
  if (now == last) {
    return;
  }
  if (status.ok()) {
    LogInfo("%s: answering again", source);
  } else {
    LogWarning("%s: %s; keeping the servers it last gave (if any)", source, now);
  }
  last = now;
}

void ServerDiscovery::RefreshFile() {
  struct stat info {};
  const std::string source = absl::StrCat("servers file ", sources_.servers_file);
  if (stat(sources_.servers_file.c_str(), &info) != 0) {
    Note(file_error_, source,
         absl::NotFoundError(absl::StrCat("cannot read it: ", std::strerror(errno))));
    return;
  }
  FileVersion version;
  version.mtime_ns = int64_t{info.st_mtim.tv_sec} * 1'000'000'000 + info.st_mtim.tv_nsec;
  version.size = info.st_size;
  version.inode = info.st_ino;
  if (version.SameAs(file_version_)) {
    return;
  }
  absl::StatusOr<std::vector<std::string>> read = ReadServersFile(sources_.servers_file);
  Note(file_error_, source, read.status());
  if (!read.ok()) {
    return;
  }
  file_version_ = version;
  from_file_ = *std::move(read);
}

void ServerDiscovery::RefreshDns() {
  absl::StatusOr<HostPort> name = SplitServerAddress(sources_.dns_name);
  if (!name.ok()) {
    return;  // refused by ValidateServerSources
  }
  absl::StatusOr<std::vector<std::string>> hosts = resolver_(name->host);
  Note(dns_error_, absl::StrCat("DNS name ", sources_.dns_name), hosts.status());
  if (!hosts.ok()) {
    return;
  }
  from_dns_.clear();
  for (const std::string& host : *hosts) {
    from_dns_.push_back(JoinHostPort(host, name->port));
  }
}

std::vector<std::string> ServerDiscovery::Refresh() {
  if (!sources_.servers_file.empty()) {
    RefreshFile();
  }
  if (!sources_.dns_name.empty()) {
    RefreshDns();
  }
  std::set<std::string> servers(sources_.fixed.begin(), sources_.fixed.end());
  servers.insert(from_file_.begin(), from_file_.end());
  servers.insert(from_dns_.begin(), from_dns_.end());
  return {servers.begin(), servers.end()};
}

}  // namespace heterodl
