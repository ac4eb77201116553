// `heterodl cluster` and `heterodl launch`: the cluster view, and becoming
// the role it gives this host.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "launcher/command_line.h"
#include "launcher/commands.h"
#include "launcher/flag_checks.h"
#include "launcher/flags.h"
#include "src/client/server_discovery.h"
#include "src/common/log.h"

namespace heterodl {

ClusterSettings ClusterSettingsFromFlags() {
  ClusterSettings settings;
  settings.role = absl::GetFlag(FLAGS_role);
  settings.data_servers = absl::GetFlag(FLAGS_data_servers);
  settings.data_servers_file = absl::GetFlag(FLAGS_data_servers_file);
  settings.data_servers_dns = absl::GetFlag(FLAGS_data_servers_dns);
  settings.dnn_hosts = absl::GetFlag(FLAGS_dnn_hosts);
  settings.current_host = absl::GetFlag(FLAGS_current_host);
  if (absl::GetFlag(FLAGS_ranks_per_host) > 0) {
    settings.ranks_per_host = absl::GetFlag(FLAGS_ranks_per_host);
  }
  if (absl::GetFlag(FLAGS_port) >= 0) {
    settings.data_port = absl::GetFlag(FLAGS_port);
  }
  if (absl::GetFlag(FLAGS_master_port) > 0) {
    settings.master_port = absl::GetFlag(FLAGS_master_port);
  }
  settings.resource_config = absl::GetFlag(FLAGS_resource_config);
  settings.data_group = absl::GetFlag(FLAGS_data_group);
  settings.dnn_group = absl::GetFlag(FLAGS_dnn_group);
  if (absl::GetFlag(FLAGS_slurm_data_component) >= 0) {
    settings.slurm_data_component = absl::GetFlag(FLAGS_slurm_data_component);
  }
  settings.dataset = absl::GetFlag(FLAGS_dataset);
  return settings;
}

int RunClusterCommand(const CommandContext& /*context*/) {
  absl::StatusOr<ClusterView> view =
      ResolveClusterView(ClusterSettingsFromFlags(), CurrentEnvironment());
  if (!view.ok()) {
    std::fprintf(stderr, "heterodl cluster: %s\n", std::string(view.status().message()).c_str());
    return kExitUsage;
  }
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("%s\n", ClusterViewToJson(*view).c_str());
    return kExitOk;
  }
  std::printf(
      "role          %s\nsource        %s\ncurrent host  %s\ndata servers  %s\n"
      "dnn hosts     %s\nleader        %s\nworld size    %d (%d per host)\n",
      RoleName(view->role), view->source.c_str(), view->current_host.c_str(),
      absl::StrJoin(view->data_servers.fixed, ", ").c_str(),
      absl::StrJoin(view->dnn_hosts, ", ").c_str(), view->leader.c_str(), view->world_size,
      view->ranks_per_host);
  if (!view->data_servers.servers_file.empty()) {
    std::printf("servers file  %s (re-read while training runs)\n",
                view->data_servers.servers_file.c_str());
  }
  if (!view->data_servers.dns_name.empty()) {
    std::printf("servers DNS   %s (every address, re-resolved while training runs)\n",
                view->data_servers.dns_name.c_str());
  }
  return kExitOk;
}

namespace {

// Whether to listen on `host`: a literal address, or a name that resolves to
// an address other hosts could reach (Debian maps its own host name to
// 127.0.1.1, where a server would be unreachable).
bool ResolvesBeyondLoopback(const std::string& host) {
  // A literal address is meant as given (127.0.0.2 for a loopback cluster).
  in6_addr ignored;
  if (inet_pton(AF_INET, host.c_str(), &ignored) == 1 ||
      inet_pton(AF_INET6, host.c_str(), &ignored) == 1) {
    return true;
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* results = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &results) != 0) {
    return false;
  }
  bool beyond = false;
  for (addrinfo* entry = results; entry != nullptr; entry = entry->ai_next) {
    if (entry->ai_family == AF_INET) {
      const auto* address = reinterpret_cast<const sockaddr_in*>(entry->ai_addr);
      beyond = beyond || (ntohl(address->sin_addr.s_addr) >> 24) != 127;
    } else if (entry->ai_family == AF_INET6) {
      const auto* address = reinterpret_cast<const sockaddr_in6*>(entry->ai_addr);
      beyond = beyond || !IN6_IS_ADDR_LOOPBACK(&address->sin6_addr);
    }
  }
  freeaddrinfo(results);
  return beyond;
}

}  // namespace

int RunLaunchCommand(const CommandContext& context) {
  const std::vector<std::string>& arguments = context.arguments;
  if (!arguments.empty()) {
    // `launch -- ARGS`: the arguments after `--` are trainer flags.
    std::vector<std::string> normalized = {"heterodl"};
    normalized.insert(normalized.end(), arguments.begin(), arguments.end());
    NormalizeFlagNames(normalized);
    absl::StatusOr<std::vector<std::string>> expanded = ExpandFlagFiles(normalized);
    absl::Status checked = expanded.ok() ? CheckFlagArguments(*expanded) : expanded.status();
    if (checked.ok()) {
      std::vector<char*> argv;
      for (std::string& argument : *expanded) {
        argv.push_back(argument.data());
      }
      const std::vector<char*> rest =
          absl::ParseCommandLine(static_cast<int>(argv.size()), argv.data());
      if (rest.size() > 1) {
        checked = absl::InvalidArgumentError(
            absl::StrCat("launch: '", rest[1], "' after -- is not a flag"));
      }
    }
    if (checked.ok()) {
      checked = CheckFlagValues();
    }
    if (!checked.ok()) {
      LogError("%s", checked.message());
      return kExitUsage;
    }
  }
  absl::StatusOr<ClusterView> view =
      ResolveClusterView(ClusterSettingsFromFlags(), CurrentEnvironment());
  if (!view.ok()) {
    LogError("%s", view.status().ToString());
    return kExitUsage;
  }
  if (absl::GetFlag(FLAGS_dataset).empty() && !view->dataset.empty()) {
    absl::SetFlag(&FLAGS_dataset, view->dataset);
  }
  LogInfo("cluster view (%s): this host %s is %s", view->source, view->current_host,
          RoleName(view->role));
  switch (view->role) {
    case Role::kData:
      SetLogTag("serve");
      if (absl::GetFlag(FLAGS_port) < 0) {
        absl::SetFlag(&FLAGS_port, view->data_port);
      }
      // Listen where the dnn group will connect: this host's name in the
      // cluster view, not every interface (--address 0.0.0.0:PORT asks for that).
      if (absl::GetFlag(FLAGS_address).empty()) {
        if (ResolvesBeyondLoopback(view->current_host)) {
          absl::SetFlag(&FLAGS_address,
                        absl::StrCat(view->current_host, ":", absl::GetFlag(FLAGS_port)));
        } else {
          LogInfo("'%s' resolves to loopback only here; listening on every interface",
                  view->current_host);
        }
      }
      return RunServeCommand(context);
    case Role::kDnn:
      if (view->homogeneous || view->data_servers.empty()) {
        // No data group: decode on this host, as `local` does.
        SetLogTag("local");
        if (absl::GetFlag(FLAGS_ranks) <= 0) {
          absl::SetFlag(&FLAGS_ranks, view->ranks_per_host);
        }
        absl::SetFlag(&FLAGS_servers, 1);
        return RunLocalCommand(context);
      }
      SetLogTag("train");
      return RunTrainCommand(context);
    case Role::kLocal:
      SetLogTag("local");
      return RunLocalCommand(context);
  }
  return kExitUsage;
}

}  // namespace heterodl
