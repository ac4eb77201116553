// ClusterView: who is who in a heterogeneous job, computed the same way on
// every host from the cluster environment.
//
//   ClusterSettings settings = ...;  // from flags, may be left empty
//   ASSIGN_OR_RETURN(ClusterView view,
//                    ResolveClusterView(settings, CurrentEnvironment()));
//   if (view.role == Role::kData) ... serve ...
//
// Sources, in order of precedence (DESIGN §2):
//   1. settings given on the command line,
//   2. HETERODL_* environment variables of the same names
//      (HETERODL_ROLE, HETERODL_DATA_SERVERS, ...); host lists take hostlist
//      patterns, so a Kubernetes JobSet names its pods' DNS names as
//      HETERODL_DATA_SERVERS=job-data-0-[0-3].job (the data port is added to
//      entries without one) and this host is found in HETERODL_DNN_HOSTS by
//      its full name or its first DNS label (the pod's hostname),
//   3. SageMaker's resourceconfig.json and SM_* variables,
//   4. a Slurm heterogeneous job (SLURM_HET_SIZE, SLURM_JOB_NODELIST_HET_GROUP_n),
//   5. otherwise a single machine (role "local").
// 3-5 give the base view; 1-2 override single fields of it.
#ifndef HETERODL_SRC_CLUSTER_CLUSTER_VIEW_H_
#define HETERODL_SRC_CLUSTER_CLUSTER_VIEW_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "src/common/net/server_sources.h"

namespace heterodl {

enum class Role { kData, kDnn, kLocal };

// "data", "dnn", "local".
const char* RoleName(Role role);

struct ClusterView {
  Role role = Role::kLocal;
  // Where the base view came from: "sagemaker", "slurm" or "local"; with
  // "+overrides" when flags or HETERODL_* variables changed fields of it.
  std::string source;
  std::string current_host;
  // The data servers: `fixed` (host:port, in a fixed order), and where more
  // are found while training runs (src/client/server_discovery.h): a file
  // re-read when it changes, and a DNS name (host:port) whose every address
  // is a server; empty: none.
  ServerSources data_servers;
  std::vector<std::string> dnn_hosts;  // in a fixed order
  std::string leader;                  // dnn_hosts[0]
  int ranks_per_host = 1;
  int world_size = 1;
  int node_rank = -1;  // index of current_host in dnn_hosts, else -1
  int master_port = 29500;
  int data_port = 50051;
  std::string dataset;  // default dataset path, e.g. SM_CHANNEL_TRAIN
  // True for a job with no data group (SageMaker without instance groups):
  // the dnn hosts decode locally.
  bool homogeneous = false;
  // The platform's checkpoint and model directories, used when --checkpoint-dir
  // and --model-dir are not given: on SageMaker /opt/ml/checkpoints (synced
  // with checkpoint_s3_uri, restored on a restarted spot job) and SM_MODEL_DIR.
  std::string checkpoint_dir;
  std::string model_dir;
};

// Values given on the command line; an empty string or nullopt means "not
// given". Each has a HETERODL_<NAME> environment variable as fallback.
struct ClusterSettings {
  std::string role;                         // HETERODL_ROLE: data | dnn | local
  std::string data_servers;                 // HETERODL_DATA_SERVERS: host:port,...
  std::string data_servers_file;            // HETERODL_DATA_SERVERS_FILE
  std::string data_servers_dns;             // HETERODL_DATA_SERVERS_DNS: name[:port]
  std::string dnn_hosts;                    // HETERODL_DNN_HOSTS: host,...
  std::string current_host;                 // HETERODL_CURRENT_HOST
  std::optional<int> ranks_per_host;        // HETERODL_RANKS_PER_HOST
  std::optional<int> data_port;             // HETERODL_DATA_PORT
  std::optional<int> master_port;           // HETERODL_MASTER_PORT
  std::string resource_config;              // HETERODL_RESOURCE_CONFIG
  std::string data_group;                   // HETERODL_DATA_GROUP (default data_group)
  std::string dnn_group;                    // HETERODL_DNN_GROUP (default dnn_group)
  std::optional<int> slurm_data_component;  // HETERODL_SLURM_DATA_COMPONENT
  std::string dataset;                      // HETERODL_DATASET
};

using Environment = absl::flat_hash_map<std::string, std::string>;

// The process environment as a map.
Environment CurrentEnvironment();

// SageMaker's default location of resourceconfig.json.
inline constexpr char kSageMakerResourceConfig[] = "/opt/ml/input/config/resourceconfig.json";

// Resolves the view. Errors name their source: an unreadable or garbled
// resource config (with the file's path), a host in no group, a bad
// HETERODL_* value (with the variable's name).
absl::StatusOr<ClusterView> ResolveClusterView(const ClusterSettings& settings,
                                               const Environment& environment);

// The view as one JSON object (keys as in proto/heterodl/cluster.proto).
std::string ClusterViewToJson(const ClusterView& view);

// Expands a Slurm hostlist expression: "cpu-[07-09],gpu1" ->
// {cpu-07, cpu-08, cpu-09, gpu1}. InvalidArgument for unbalanced brackets or
// bad ranges.
absl::StatusOr<std::vector<std::string>> ExpandSlurmHostlist(const std::string& expression);

// Orders host names with numbers compared as numbers: algo-2 < algo-10.
bool HostNameLess(const std::string& a, const std::string& b);

}  // namespace heterodl

#endif  // HETERODL_SRC_CLUSTER_CLUSTER_VIEW_H_
