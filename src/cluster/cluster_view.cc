#include "src/cluster/cluster_view.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "heterodl/cluster.pb.h"
#include "src/common/net/host_port.h"
#include "src/common/proto_json.h"
#include "src/common/read_file.h"
#include "src/common/status_macros.h"

extern char** environ;

namespace heterodl {
namespace {

std::string Lookup(const Environment& environment, const std::string& name) {
  auto it = environment.find(name);
  return it == environment.end() ? std::string() : it->second;
}

// A setting's value: the flag if given, else HETERODL_<NAME>.
std::string Setting(const std::string& flag, const Environment& environment,
                    const std::string& variable) {
  return flag.empty() ? Lookup(environment, variable) : flag;
}

absl::StatusOr<std::optional<int>> IntSetting(std::optional<int> flag,
                                              const Environment& environment,
                                              const std::string& variable) {
  if (flag) {
    return flag;
  }
  const std::string value = Lookup(environment, variable);
  if (value.empty()) {
    return std::optional<int>();
  }
  int parsed = 0;
  if (!absl::SimpleAtoi(value, &parsed)) {
    return absl::InvalidArgumentError(absl::StrCat(variable, "='", value, "' is not an integer"));
  }
  return std::optional<int>(parsed);
}

std::string LocalHostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) {
    return "localhost";
  }
  return name;
}

void SortHosts(std::vector<std::string>& hosts) {
  std::sort(hosts.begin(), hosts.end(), HostNameLess);
}

// Fills the fields that follow from the hosts: leader, world size, rank.
// "pod-0.service.ns" -> "pod-0".
absl::string_view FirstLabel(absl::string_view host) { return host.substr(0, host.find('.')); }

void CompleteView(ClusterView& view) {
  view.data_servers.fixed.clear();
  view.leader = view.dnn_hosts.empty() ? std::string() : view.dnn_hosts.front();
  view.world_size = static_cast<int>(view.dnn_hosts.size()) * view.ranks_per_host;
  auto it = std::find(view.dnn_hosts.begin(), view.dnn_hosts.end(), view.current_host);
  if (it == view.dnn_hosts.end()) {
    // A pod knows its hostname; the host list has its DNS name.
    it = std::find_if(view.dnn_hosts.begin(), view.dnn_hosts.end(), [&view](const std::string& h) {
      return FirstLabel(h) == FirstLabel(view.current_host);
    });
  }
  view.node_rank = it == view.dnn_hosts.end() ? -1 : static_cast<int>(it - view.dnn_hosts.begin());
}

std::vector<std::string> WithPort(const std::vector<std::string>& hosts, int port) {
  std::vector<std::string> servers;
  servers.reserve(hosts.size());
  for (const std::string& host : hosts) {
    servers.push_back(absl::StrCat(host, ":", port));
  }
  return servers;
}

// The role of `host` given the two groups' hosts; `where` names the source
// for the error.
absl::StatusOr<Role> RoleOfHost(const std::vector<std::string>& data_hosts,
                                const std::vector<std::string>& dnn_hosts, const std::string& host,
                                const std::string& where) {
  const auto contains = [&host](const std::vector<std::string>& hosts) {
    return std::find(hosts.begin(), hosts.end(), host) != hosts.end();
  };
  if (contains(data_hosts)) {
    return Role::kData;
  }
  if (contains(dnn_hosts)) {
    return Role::kDnn;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": this host '", host, "' is in neither group's host list"));
}

absl::StatusOr<v1::SageMakerResourceConfig> ReadSageMakerConfig(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("SageMaker resource config: ", text.status().message()));
  }
  v1::SageMakerResourceConfig config;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  auto status = google::protobuf::util::JsonStringToMessage(*text, &config, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SageMaker resource config '", path, "' is not valid JSON: ", status.message().ToString()));
  }
  if (config.current_host().empty() || config.hosts().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("SageMaker resource config '", path, "' lacks current_host or hosts"));
  }
  return config;
}

// What SageMaker's environment says beside the resource config: the
// dataset channel, checkpoint and model directories, GPUs per host.
ClusterView SageMakerBaseView(const v1::SageMakerResourceConfig& config,
                              const Environment& environment) {
  ClusterView view;
  view.source = "sagemaker";
  view.current_host = config.current_host();
  view.dataset = Lookup(environment, "SM_CHANNEL_TRAIN");
  view.checkpoint_dir = "/opt/ml/checkpoints";
  view.model_dir = Lookup(environment, "SM_MODEL_DIR");
  if (view.model_dir.empty()) {
    view.model_dir = "/opt/ml/model";
  }
  int gpus = 0;
  if (absl::SimpleAtoi(Lookup(environment, "SM_NUM_GPUS"), &gpus) && gpus > 0) {
    view.ranks_per_host = gpus;
  }
  return view;
}

// The hosts of the data and dnn instance groups (sorted), when both exist.
struct InstanceGroups {
  std::optional<std::vector<std::string>> data_hosts;
  std::optional<std::vector<std::string>> dnn_hosts;
};

InstanceGroups FindInstanceGroups(const v1::SageMakerResourceConfig& config,
                                  const std::string& data_group, const std::string& dnn_group) {
  InstanceGroups groups;
  for (const v1::SageMakerInstanceGroup& group : config.instance_groups()) {
    std::vector<std::string> hosts(group.hosts().begin(), group.hosts().end());
    SortHosts(hosts);
    if (group.instance_group_name() == data_group) {
      groups.data_hosts = std::move(hosts);
    } else if (group.instance_group_name() == dnn_group) {
      groups.dnn_hosts = std::move(hosts);
    }
  }
  return groups;
}

absl::StatusOr<ClusterView> FromSageMaker(const std::string& path, const ClusterSettings& settings,
                                          const Environment& environment) {
  ASSIGN_OR_RETURN(const v1::SageMakerResourceConfig config, ReadSageMakerConfig(path));
  std::string data_group = Setting(settings.data_group, environment, "HETERODL_DATA_GROUP");
  std::string dnn_group = Setting(settings.dnn_group, environment, "HETERODL_DNN_GROUP");
  if (data_group.empty()) {
    data_group = "data_group";
  }
  if (dnn_group.empty()) {
    dnn_group = "dnn_group";
  }
  ClusterView view = SageMakerBaseView(config, environment);
  InstanceGroups groups = FindInstanceGroups(config, data_group, dnn_group);
  if (!groups.data_hosts && !groups.dnn_hosts && config.instance_groups_size() <= 1) {
    // A homogeneous job: every host trains and decodes its own data.
    view.homogeneous = true;
    view.role = Role::kDnn;
    view.dnn_hosts.assign(config.hosts().begin(), config.hosts().end());
    SortHosts(view.dnn_hosts);
    CompleteView(view);
    return view;
  }
  if (!groups.data_hosts || !groups.dnn_hosts) {
    std::vector<std::string> names;
    for (const auto& group : config.instance_groups()) {
      names.push_back(group.instance_group_name());
    }
    return absl::InvalidArgumentError(absl::StrFormat(
        "SageMaker resource config '%s': expected instance groups '%s' and '%s', found [%s] "
        "(set --data-group / --dnn-group to match)",
        path, data_group, dnn_group, absl::StrJoin(names, ", ")));
  }
  view.dnn_hosts = *std::move(groups.dnn_hosts);
  ASSIGN_OR_RETURN(view.role, RoleOfHost(*groups.data_hosts, view.dnn_hosts, view.current_host,
                                         absl::StrCat("SageMaker resource config '", path, "'")));
  CompleteView(view);
  view.data_servers.fixed = WithPort(*groups.data_hosts, view.data_port);
  return view;
}

absl::StatusOr<ClusterView> FromSlurm(const ClusterSettings& settings,
                                      const Environment& environment) {
  ASSIGN_OR_RETURN(
      std::optional<int> component,
      IntSetting(settings.slurm_data_component, environment, "HETERODL_SLURM_DATA_COMPONENT"));
  const int data_component = component.value_or(0);
  if (data_component != 0 && data_component != 1) {
    return absl::InvalidArgumentError("--slurm-data-component must be 0 or 1");
  }
  const int dnn_component = 1 - data_component;
  const auto nodelist = [&](int group) -> absl::StatusOr<std::vector<std::string>> {
    const std::string name = absl::StrCat("SLURM_JOB_NODELIST_HET_GROUP_", group);
    const std::string value = Lookup(environment, name);
    if (value.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("Slurm heterogeneous job without ", name));
    }
    absl::StatusOr<std::vector<std::string>> hosts = ExpandSlurmHostlist(value);
    if (!hosts.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", hosts.status().message()));
    }
    return hosts;
  };
  ClusterView view;
  view.source = "slurm";
  ASSIGN_OR_RETURN(std::vector<std::string> data_hosts, nodelist(data_component));
  ASSIGN_OR_RETURN(view.dnn_hosts, nodelist(dnn_component));
  view.current_host = Lookup(environment, "SLURMD_NODENAME");
  if (view.current_host.empty()) {
    view.current_host = LocalHostName();
  }
  ASSIGN_OR_RETURN(view.role, RoleOfHost(data_hosts, view.dnn_hosts, view.current_host,
                                         "Slurm heterogeneous job"));
  int gpus = 0;
  if (absl::SimpleAtoi(Lookup(environment, "SLURM_GPUS_ON_NODE"), &gpus) && gpus > 0) {
    view.ranks_per_host = gpus;
  }
  CompleteView(view);
  view.data_servers.fixed = WithPort(data_hosts, view.data_port);
  return view;
}

ClusterView SingleMachine() {
  ClusterView view;
  view.source = "local";
  view.role = Role::kLocal;
  view.current_host = "127.0.0.1";
  view.dnn_hosts = {"127.0.0.1"};
  CompleteView(view);
  return view;
}

// --dnn-hosts / HETERODL_DNN_HOSTS, a hostlist pattern.
absl::Status OverrideDnnHosts(const std::string& dnn_hosts, bool current_host_given,
                              ClusterView& view) {
  absl::StatusOr<std::vector<std::string>> hosts = ExpandSlurmHostlist(dnn_hosts);
  if (!hosts.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dnn hosts (--dnn-hosts / HETERODL_DNN_HOSTS): ", hosts.status().message()));
  }
  view.dnn_hosts = *std::move(hosts);
  // With no platform's view to name this host (a Kubernetes pod), it is this
  // machine's host name, as the pod's hostname is in the list.
  if (!current_host_given && view.source == "local") {
    view.current_host = LocalHostName();
  }
  return absl::OkStatus();
}

// --data-port: every known server moves to it, and it is the port of
// servers named without one.
absl::Status OverrideDataPort(int data_port, ClusterView& view, std::vector<std::string>& servers) {
  if (data_port < 0 || data_port > 65535) {
    return absl::InvalidArgumentError("data port must be in [0, 65535]");
  }
  view.data_port = data_port;
  for (std::string& server : servers) {
    server = absl::StrCat(server.substr(0, server.rfind(':')), ":", data_port);
  }
  return absl::OkStatus();
}

// --data-servers / HETERODL_DATA_SERVERS: host:port or hostlist patterns.
absl::StatusOr<std::vector<std::string>> ExpandDataServers(const std::string& data_servers,
                                                           int default_port) {
  absl::StatusOr<std::vector<std::string>> expanded = ExpandSlurmHostlist(data_servers);
  if (!expanded.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data servers (--data-servers / HETERODL_DATA_SERVERS): ", expanded.status().message()));
  }
  std::vector<std::string> servers;
  for (std::string& server : *expanded) {
    server = std::string(absl::StripAsciiWhitespace(server));
    if (server.empty()) {
      continue;
    }
    if (server.find(':') == std::string::npos) {
      absl::StrAppend(&server, ":", default_port);
    }
    if (absl::Status valid = SplitServerAddress(server).status(); !valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("data servers (--data-servers / HETERODL_DATA_SERVERS): ", valid.message()));
    }
    servers.push_back(std::move(server));
  }
  return servers;
}

absl::StatusOr<Role> ParseRole(const std::string& role) {
  if (role == "data") {
    return Role::kData;
  }
  if (role == "dnn") {
    return Role::kDnn;
  }
  if (role == "local") {
    return Role::kLocal;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("role '", role, "' is not one of data, dnn, local"));
}

absl::Status ApplyOverrides(const ClusterSettings& settings, const Environment& environment,
                            ClusterView& view) {
  const std::string role = Setting(settings.role, environment, "HETERODL_ROLE");
  const std::string data_servers =
      Setting(settings.data_servers, environment, "HETERODL_DATA_SERVERS");
  const std::string dnn_hosts = Setting(settings.dnn_hosts, environment, "HETERODL_DNN_HOSTS");
  const std::string servers_file =
      Setting(settings.data_servers_file, environment, "HETERODL_DATA_SERVERS_FILE");
  const std::string servers_dns =
      Setting(settings.data_servers_dns, environment, "HETERODL_DATA_SERVERS_DNS");
  const std::string current_host =
      Setting(settings.current_host, environment, "HETERODL_CURRENT_HOST");
  const std::string dataset = Setting(settings.dataset, environment, "HETERODL_DATASET");
  ASSIGN_OR_RETURN(std::optional<int> ranks,
                   IntSetting(settings.ranks_per_host, environment, "HETERODL_RANKS_PER_HOST"));
  ASSIGN_OR_RETURN(std::optional<int> data_port,
                   IntSetting(settings.data_port, environment, "HETERODL_DATA_PORT"));
  ASSIGN_OR_RETURN(std::optional<int> master_port,
                   IntSetting(settings.master_port, environment, "HETERODL_MASTER_PORT"));
  const bool overridden = !role.empty() || !data_servers.empty() || !dnn_hosts.empty() ||
                          !current_host.empty() || ranks || data_port || master_port ||
                          !servers_file.empty() || !servers_dns.empty();

  if (!current_host.empty()) {
    view.current_host = current_host;
  }
  if (!dnn_hosts.empty()) {
    RETURN_IF_ERROR(OverrideDnnHosts(dnn_hosts, !current_host.empty(), view));
  }
  if (ranks) {
    if (*ranks < 1 || *ranks > 1024) {
      return absl::InvalidArgumentError("ranks per host must be in [1, 1024]");
    }
    view.ranks_per_host = *ranks;
  }
  if (master_port) {
    view.master_port = *master_port;
  }
  std::vector<std::string> servers = view.data_servers.fixed;
  if (data_port) {
    RETURN_IF_ERROR(OverrideDataPort(*data_port, view, servers));
  }
  if (!data_servers.empty()) {
    ASSIGN_OR_RETURN(servers, ExpandDataServers(data_servers, view.data_port));
  }
  if (!role.empty()) {
    ASSIGN_OR_RETURN(view.role, ParseRole(role));
  }
  if (!dataset.empty()) {
    view.dataset = dataset;
  }
  CompleteView(view);
  view.data_servers.fixed = std::move(servers);
  view.data_servers.servers_file = servers_file;
  if (!servers_dns.empty()) {
    // A name without a port gets the data port, as hostlist entries do.
    std::string named(absl::StripAsciiWhitespace(servers_dns));
    if (named.find(':') == std::string::npos) {
      absl::StrAppend(&named, ":", view.data_port);
    }
    if (absl::Status valid = SplitServerAddress(named).status(); !valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("data servers' DNS name (--data-servers-dns / HETERODL_DATA_SERVERS_DNS): ",
                       valid.message()));
    }
    view.data_servers.dns_name = std::move(named);
  }
  if (overridden && view.source.find("+overrides") == std::string::npos) {
    view.source += "+overrides";
  }
  return absl::OkStatus();
}

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case Role::kData:
      return "data";
    case Role::kDnn:
      return "dnn";
    case Role::kLocal:
      return "local";
  }
  return "unknown";
}

Environment CurrentEnvironment() {
  Environment environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    absl::string_view text(*entry);
    const size_t equals = text.find('=');
    if (equals == absl::string_view::npos) {
      continue;
    }
    environment[std::string(text.substr(0, equals))] = std::string(text.substr(equals + 1));
  }
  return environment;
}

absl::StatusOr<ClusterView> ResolveClusterView(const ClusterSettings& settings,
                                               const Environment& environment) {
  std::string resource_config =
      Setting(settings.resource_config, environment, "HETERODL_RESOURCE_CONFIG");
  const bool explicit_config = !resource_config.empty();
  if (!explicit_config) {
    resource_config = kSageMakerResourceConfig;
  }

  ClusterView view;
  std::error_code error;
  if (explicit_config || std::filesystem::exists(resource_config, error)) {
    ASSIGN_OR_RETURN(view, FromSageMaker(resource_config, settings, environment));
  } else if (!Lookup(environment, "SLURM_HET_SIZE").empty()) {
    ASSIGN_OR_RETURN(view, FromSlurm(settings, environment));
  } else {
    view = SingleMachine();
  }
  RETURN_IF_ERROR(ApplyOverrides(settings, environment, view));
  return view;
}

std::string ClusterViewToJson(const ClusterView& view) {
  v1::ClusterViewProto proto;
  proto.set_role(RoleName(view.role));
  proto.set_source(view.source);
  proto.set_current_host(view.current_host);
  for (const std::string& server : view.data_servers.fixed) {
    proto.add_data_servers(server);
  }
  proto.set_data_servers_file(view.data_servers.servers_file);
  proto.set_data_servers_dns(view.data_servers.dns_name);
  for (const std::string& host : view.dnn_hosts) {
    proto.add_dnn_hosts(host);
  }
  proto.set_leader(view.leader);
  proto.set_ranks_per_host(view.ranks_per_host);
  proto.set_world_size(view.world_size);
  proto.set_node_rank(view.node_rank);
  proto.set_master_port(view.master_port);
  proto.set_data_port(view.data_port);
  proto.set_dataset(view.dataset);
  proto.set_homogeneous(view.homogeneous);
  proto.set_checkpoint_dir(view.checkpoint_dir);
  proto.set_model_dir(view.model_dir);
  return ToJson(proto);
}

bool HostNameLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) &&
        std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t end_i = i, end_j = j;
      while (end_i < a.size() && std::isdigit(static_cast<unsigned char>(a[end_i]))) {
        ++end_i;
      }
      while (end_j < b.size() && std::isdigit(static_cast<unsigned char>(b[end_j]))) {
        ++end_j;
      }
      // Compare numerically by length after leading zeros, then digit-wise.
      absl::string_view number_a = absl::string_view(a).substr(i, end_i - i);
      absl::string_view number_b = absl::string_view(b).substr(j, end_j - j);
      number_a.remove_prefix(std::min(number_a.find_first_not_of('0'), number_a.size()));
      number_b.remove_prefix(std::min(number_b.find_first_not_of('0'), number_b.size()));
      if (number_a.size() != number_b.size()) {
        return number_a.size() < number_b.size();
      }
      if (number_a != number_b) {
        return number_a < number_b;
      }
      i = end_i;
      j = end_j;
      continue;
    }
    if (a[i] != b[j]) {
      return a[i] < b[j];
    }
    ++i;
    ++j;
  }
  if (a.size() - i != b.size() - j) {
    return a.size() - i < b.size() - j;
  }
  return a < b;
}

absl::StatusOr<std::vector<std::string>> ExpandSlurmHostlist(const std::string& expression) {
  // Split on commas outside brackets.
  std::vector<std::string> terms;
  int depth = 0;
  std::string current;
  for (char c : expression) {
    if (c == '[') {
      ++depth;
    }
    if (c == ']' && --depth < 0) {
      break;
    }
    if (c == ',' && depth == 0) {
      terms.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  if (depth != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unbalanced brackets in hostlist '", expression, "'"));
  }
  terms.push_back(current);

  std::vector<std::string> hosts;
  for (const std::string& term : terms) {
    if (term.empty()) {
      continue;
    }
    const size_t open = term.find('[');
    if (open == std::string::npos) {
      hosts.push_back(term);
      continue;
    }
    const size_t close = term.find(']', open);
    if (close == std::string::npos || term.find('[', open + 1) != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("unsupported hostlist term '", term, "'"));
    }
    const std::string prefix = term.substr(0, open);
    const std::string suffix = term.substr(close + 1);
    for (absl::string_view range :
         absl::StrSplit(absl::string_view(term).substr(open + 1, close - open - 1), ',')) {
      std::vector<absl::string_view> bounds = absl::StrSplit(range, '-');
      uint64_t low = 0, high = 0;
      if (bounds.empty() || bounds.size() > 2 || !absl::SimpleAtoi(bounds[0], &low) ||
          !absl::SimpleAtoi(bounds.back(), &high) || high < low || high - low > 100000) {
        return absl::InvalidArgumentError(
            absl::StrCat("bad range '", range, "' in hostlist '", expression, "'"));
      }
      const size_t width = bounds[0].size();  // zero padding, as in cpu-[07-09]
      for (uint64_t n = low; n <= high; ++n) {
        hosts.push_back(absl::StrCat(prefix, absl::StrFormat("%0*d", width, n), suffix));
      }
    }
  }
  return hosts;
}

}  // namespace heterodl
