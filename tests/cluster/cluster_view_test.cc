#include "src/cluster/cluster_view.h"

#include "gtest/gtest.h"
#include "tests/testing/test_images.h"

namespace heterodl {
namespace {

using ::heterodl::testing::MakeTempDir;
using ::heterodl::testing::WriteFile;

// The real format, as a data host of a 3-host job sees it (DESIGN §2).
constexpr char kDataHostConfig[] = R"({"current_group_name":"data_group","current_host":"algo-2",
  "current_instance_type":"ml.c5.18xlarge","hosts":["algo-1","algo-2","algo-3"],
  "instance_groups":[{"hosts":["algo-2","algo-3"],"instance_group_name":"data_group",
                      "instance_type":"ml.c5.18xlarge"},
                     {"hosts":["algo-1"],"instance_group_name":"dnn_group",
                      "instance_type":"ml.p4d.24xlarge"}],
  "network_interface_name":"eth0"})";

std::string WriteConfig(const std::string& name, const std::string& json) {
  std::filesystem::path path = MakeTempDir(name) / "resourceconfig.json";
  WriteFile(path, json);
  return path.string();
}

absl::StatusOr<ClusterView> Resolve(const std::string& config,
                                    const Environment& environment = {}) {
  ClusterSettings settings;
  settings.resource_config = config;
  return ResolveClusterView(settings, environment);
}

TEST(ClusterViewTest, SageMakerDataHost) {
  absl::StatusOr<ClusterView> view = Resolve(WriteConfig("data_host", kDataHostConfig));
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->role, Role::kData);
  EXPECT_EQ(view->source, "sagemaker");
  EXPECT_EQ(view->current_host, "algo-2");
  EXPECT_EQ(view->data_servers.fixed, (std::vector<std::string>{"algo-2:50051", "algo-3:50051"}));
  EXPECT_EQ(view->dnn_hosts, (std::vector<std::string>{"algo-1"}));
  EXPECT_EQ(view->leader, "algo-1");
  EXPECT_EQ(view->world_size, 1);
  EXPECT_EQ(view->node_rank, -1);
}

TEST(ClusterViewTest, SageMakerDnnHostWithGpus) {
  std::string json = kDataHostConfig;
  json.replace(json.find("\"current_host\":\"algo-2\""), 23, "\"current_host\":\"algo-1\"");
  absl::StatusOr<ClusterView> view =
      Resolve(WriteConfig("dnn_host", json),
              {{"SM_NUM_GPUS", "8"}, {"SM_CHANNEL_TRAIN", "/opt/ml/input/data/train"}});
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->role, Role::kDnn);
  EXPECT_EQ(view->node_rank, 0);
  EXPECT_EQ(view->ranks_per_host, 8);
  EXPECT_EQ(view->world_size, 8);
  EXPECT_EQ(view->dataset, "/opt/ml/input/data/train");
  EXPECT_EQ(view->data_servers.fixed.size(), 2u);
  // SageMaker's paths: checkpoints synced with S3, the model directory.
  EXPECT_EQ(view->checkpoint_dir, "/opt/ml/checkpoints");
  EXPECT_EQ(view->model_dir, "/opt/ml/model");
}

TEST(ClusterViewTest, KubernetesJobSetDnsPatterns) {
  // What examples/kubernetes/jobset.yaml gives a dnn pod: its hostname, and
  // the headless service's DNS names as hostlist patterns.
  Environment environment = {{"HETERODL_ROLE", "dnn"},
                             {"HETERODL_DATA_SERVERS", "heterodl-data-0-[0-2].heterodl"},
                             {"HETERODL_DNN_HOSTS", "heterodl-dnn-0-[0-1].heterodl"},
                             {"HETERODL_CURRENT_HOST", "heterodl-dnn-0-1"},
                             {"HETERODL_RANKS_PER_HOST", "2"}};
  absl::StatusOr<ClusterView> view = ResolveClusterView({}, environment);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->role, Role::kDnn);
  EXPECT_EQ(view->data_servers.fixed,
            (std::vector<std::string>{"heterodl-data-0-0.heterodl:50051",
                                      "heterodl-data-0-1.heterodl:50051",
                                      "heterodl-data-0-2.heterodl:50051"}));
  EXPECT_EQ(view->leader, "heterodl-dnn-0-0.heterodl");
  EXPECT_EQ(view->node_rank, 1);  // found by its first DNS label
  EXPECT_EQ(view->world_size, 4);
  EXPECT_TRUE(view->checkpoint_dir.empty());

  environment["HETERODL_DATA_SERVERS"] = "a:1,b-[1-";
  absl::StatusOr<ClusterView> bad = ResolveClusterView({}, environment);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("HETERODL_DATA_SERVERS"), std::string::npos);
}

TEST(ClusterViewTest, HostsNotOrderedByGroupAndSeveralPerGroup) {
  // Every host must compute the same view whatever order the lists hold.
  const char* config =
      R"({"current_host":"algo-10","hosts":["algo-10","algo-3","algo-2","algo-1","algo-9"],
    "instance_groups":[{"hosts":["algo-10","algo-2"],"instance_group_name":"dnn_group","instance_type":"ml.p3.2xlarge"},
                       {"hosts":["algo-9","algo-1","algo-3"],"instance_group_name":"data_group","instance_type":"ml.c5.9xlarge"}]})";
  absl::StatusOr<ClusterView> view = Resolve(WriteConfig("unordered", config));
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->role, Role::kDnn);
  EXPECT_EQ(view->dnn_hosts, (std::vector<std::string>{"algo-2", "algo-10"}));
  EXPECT_EQ(view->leader, "algo-2");
  EXPECT_EQ(view->node_rank, 1);
  EXPECT_EQ(view->world_size, 2);
  EXPECT_EQ(view->data_servers.fixed,
            (std::vector<std::string>{"algo-1:50051", "algo-3:50051", "algo-9:50051"}));
}

TEST(ClusterViewTest, HomogeneousJob) {
  const char* config =
      R"({"current_host":"algo-2","hosts":["algo-1","algo-2"],"network_interface_name":"eth0"})";
  absl::StatusOr<ClusterView> view = Resolve(WriteConfig("homogeneous", config));
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_TRUE(view->homogeneous);
  EXPECT_EQ(view->role, Role::kDnn);
  EXPECT_TRUE(view->data_servers.fixed.empty());
  EXPECT_EQ(view->dnn_hosts, (std::vector<std::string>{"algo-1", "algo-2"}));
  EXPECT_EQ(view->node_rank, 1);
}

TEST(ClusterViewTest, CustomGroupNames) {
  std::string json = kDataHostConfig;
  for (auto [from, to] : {std::pair<std::string, std::string>{"\"data_group\"", "\"cpu\""},
                          {"\"dnn_group\"", "\"gpu\""}}) {
    for (size_t at; (at = json.find(from)) != std::string::npos;) {
      json.replace(at, from.size(), to);
    }
  }
  const std::string path = WriteConfig("groups", json);
  EXPECT_FALSE(Resolve(path).ok());
  ClusterSettings settings;
  settings.resource_config = path;
  settings.data_group = "cpu";
  settings.dnn_group = "gpu";
  absl::StatusOr<ClusterView> view = ResolveClusterView(settings, {});
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->role, Role::kData);
}

TEST(ClusterViewTest, MissingFileNamesIt) {
  absl::StatusOr<ClusterView> view = Resolve("/nonexistent/resourceconfig.json");
  ASSERT_FALSE(view.ok());
  EXPECT_NE(view.status().message().find("/nonexistent/resourceconfig.json"), std::string::npos)
      << view.status();
}

TEST(ClusterViewTest, GarbledFileNamesItAndTheProblem) {
  const std::string path = WriteConfig("garbled", R"({"current_host": "algo-1", "hosts": [)");
  absl::StatusOr<ClusterView> view = Resolve(path);
  ASSERT_FALSE(view.ok());
  EXPECT_NE(view.status().message().find(path), std::string::npos) << view.status();
  EXPECT_NE(view.status().message().find("not valid JSON"), std::string::npos) << view.status();
}

TEST(ClusterViewTest, HostInNoGroupIsAnError) {
  std::string json = kDataHostConfig;
  json.replace(json.find("\"current_host\":\"algo-2\""), 23, "\"current_host\":\"algo-7\"");
  absl::StatusOr<ClusterView> view = Resolve(WriteConfig("stranger", json));
  ASSERT_FALSE(view.ok());
  EXPECT_NE(view.status().message().find("algo-7"), std::string::npos);
}

TEST(ClusterViewTest, FlagsBeatEnvironmentBeatSageMaker) {
  const std::string path = WriteConfig("precedence", kDataHostConfig);
  Environment environment = {
      {"HETERODL_RESOURCE_CONFIG", path}, {"HETERODL_DATA_PORT", "6000"}, {"HETERODL_ROLE", "dnn"}};
  absl::StatusOr<ClusterView> from_env = ResolveClusterView({}, environment);
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  EXPECT_EQ(from_env->role, Role::kDnn);
  EXPECT_EQ(from_env->data_servers.fixed, (std::vector<std::string>{"algo-2:6000", "algo-3:6000"}));
  EXPECT_EQ(from_env->source, "sagemaker+overrides");

  ClusterSettings settings;
  settings.role = "data";
  settings.data_servers = "x:1,y:2";
  absl::StatusOr<ClusterView> from_flags = ResolveClusterView(settings, environment);
  ASSERT_TRUE(from_flags.ok());
  EXPECT_EQ(from_flags->role, Role::kData);
  EXPECT_EQ(from_flags->data_servers.fixed, (std::vector<std::string>{"x:1", "y:2"}));
}

TEST(ClusterViewTest, BadEnvironmentValueNamesTheVariable) {
  absl::StatusOr<ClusterView> view = ResolveClusterView({}, {{"HETERODL_DATA_PORT", "lots"}});
  ASSERT_FALSE(view.ok());
  EXPECT_NE(view.status().message().find("HETERODL_DATA_PORT"), std::string::npos);
  EXPECT_FALSE(ResolveClusterView({}, {{"HETERODL_ROLE", "boss"}}).ok());
}

TEST(ClusterViewTest, SingleMachineByDefault) {
  absl::StatusOr<ClusterView> view = ResolveClusterView({}, {});
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->role, Role::kLocal);
  EXPECT_EQ(view->world_size, 1);
  const std::string json = ClusterViewToJson(*view);
  EXPECT_NE(json.find("\"role\":\"local\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"world_size\":1"), std::string::npos) << json;
  EXPECT_NE(json.find("\"data_servers\":[]"), std::string::npos) << json;
}

TEST(ClusterViewTest, SlurmHeterogeneousJob) {
  Environment environment = {{"SLURM_HET_SIZE", "2"},
                             {"SLURM_JOB_NODELIST_HET_GROUP_0", "cpu-[07-09],cpu-12"},
                             {"SLURM_JOB_NODELIST_HET_GROUP_1", "gpu[1-2]"},
                             {"SLURMD_NODENAME", "gpu2"},
                             {"SLURM_GPUS_ON_NODE", "4"}};
  absl::StatusOr<ClusterView> view = ResolveClusterView({}, environment);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->source, "slurm");
  EXPECT_EQ(view->role, Role::kDnn);
  EXPECT_EQ(view->data_servers.fixed, (std::vector<std::string>{"cpu-07:50051", "cpu-08:50051",
                                                                "cpu-09:50051", "cpu-12:50051"}));
  EXPECT_EQ(view->node_rank, 1);
  EXPECT_EQ(view->world_size, 8);

  ClusterSettings swapped;
  swapped.slurm_data_component = 1;
  absl::StatusOr<ClusterView> swapped_view = ResolveClusterView(swapped, environment);
  ASSERT_TRUE(swapped_view.ok());
  EXPECT_EQ(swapped_view->role, Role::kData);
}

TEST(ClusterViewTest, SlurmHostlists) {
  EXPECT_EQ(*ExpandSlurmHostlist("cpu-[07-09],cpu-12"),
            (std::vector<std::string>{"cpu-07", "cpu-08", "cpu-09", "cpu-12"}));
  EXPECT_EQ(*ExpandSlurmHostlist("n[1,3-4]x"), (std::vector<std::string>{"n1x", "n3x", "n4x"}));
  EXPECT_FALSE(ExpandSlurmHostlist("n[1-").ok());
  EXPECT_FALSE(ExpandSlurmHostlist("n[5-2]").ok());
}

TEST(ClusterViewTest, HostNamesSortNumerically) {
  EXPECT_TRUE(HostNameLess("algo-2", "algo-10"));
  EXPECT_FALSE(HostNameLess("algo-10", "algo-2"));
  EXPECT_TRUE(HostNameLess("a", "b"));
}

}  // namespace
}  // namespace heterodl
