#include "launcher/command_table.h"

#include <algorithm>
#include <initializer_list>
#include <set>
#include <string>
#include <utility>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "launcher/command_line.h"
#include "launcher/commands.h"

namespace heterodl {
namespace {

// Flags every command reads.
constexpr const char* kCommonFlags[] = {"log_level", "flagfile"};

// Flag groups several commands take.
constexpr const char* kTlsClientFlags[] = {"auth_token_file", "tls_ca", "tls_cert", "tls_key",
                                           "tls_server_name"};
constexpr const char* kTrainingFlags[] = {"model",          "epochs",
                                          "steps",          "batch_size",
                                          "seed",           "shuffle_block_shards",
                                          "pipeline",       "lr",
                                          "optimizer",      "momentum",
                                          "weight_decay",   "warmup_steps",
                                          "lr_schedule",    "device",
                                          "precision",      "memory_format",
                                          "device_step_ms", "bucket_mb",
                                          "checkpoint_dir", "checkpoint_every",
                                          "resume",         "model_dir",
                                          "metrics_file",   "metrics_port",
                                          "sample_log_dir", "connect_timeout",
                                          "pixel_channel",  "max_failed_fraction"};
constexpr const char* kClusterFlags[] = {
    "role",         "data_servers",        "data_servers_file", "data_servers_dns", "dnn_hosts",
    "current_host", "ranks_per_host",      "master_port",       "resource_config",  "data_group",
    "dnn_group",    "slurm_data_component"};

// What a user's own Python dataset is served with (serve, and the commands
// that start servers).
constexpr const char* kPythonDatasetFlags[] = {"python_dataset", "python_path", "python_workers",
                                               "python", "python_sample_timeout"};

// How s3:// datasets are read (serve, and the commands that start servers
// or open datasets).
constexpr const char* kObjectStorageFlags[] = {"s3_endpoint",   "s3_region",      "s3_addressing",
                                               "s3_no_sign",    "cache_dir",      "cache_mb",
                                               "read_chunk_mb", "chunk_memory_mb"};

// Which features of a TFRecord dataset's records make a sample.
constexpr const char* kTfRecordFlags[] = {"tfrecord_image_key", "tfrecord_label_key",
                                          "tfrecord_label_offset", "tfrecord_mask_key"};

using FlagGroup = std::initializer_list<const char*>;

// The flags of `parts` in order, each a group above or a FlagGroup.
std::vector<const char*> Flags(std::initializer_list<absl::Span<const char* const>> parts) {
  std::vector<const char*> flags;
  for (const absl::Span<const char* const> part : parts) {
    flags.insert(flags.end(), part.begin(), part.end());
  }
  return flags;
}

}  // namespace

const std::vector<CommandInfo>& Commands() {
  static const std::vector<CommandInfo>* commands = new std::vector<CommandInfo>{
      {"launch", "[-- TRAIN_FLAGS]",
       "(default) read the cluster environment (SageMaker, Slurm, HETERODL_*), become serve or "
       "train",
       Flags({kClusterFlags, FlagGroup{"dataset", "port", "ranks"}, kObjectStorageFlags,
              kTfRecordFlags, kPythonDatasetFlags, kTrainingFlags}),
       "heterodl launch -- --model resnet50 --epochs 90 --batch-size 256", RunLaunchCommand},
      {"serve", "", "data-group server: decode, augment and stream batches over gRPC",
       Flags({FlagGroup{"dataset"}, kPythonDatasetFlags,
              FlagGroup{"synthetic",
                        "pipeline",
                        "address",
                        "port",
                        "port_file",
                        "threads",
                        "worker_nice",
                        "max_pixels",
                        "max_file_mb",
                        "dataset_root",
                        "image_root",
                        "min_box_visibility",
                        "strict_decode",
                        "ignore_index",
                        "strict_dataset",
                        "max_streams",
                        "max_streams_per_host",
                        "max_stream_mb",
                        "max_memory_mb",
                        "unread_timeout",
                        "max_pipeline_cost",
                        "pixel_port",
                        "same_host_pixels",
                        "idle_timeout",
                        "startup_timeout",
                        "metrics_port",
                        "auth_token_file",
                        "tls_cert",
                        "tls_key",
                        "tls_ca"},
              kObjectStorageFlags, kTfRecordFlags}),
       "heterodl serve --dataset /data/imagenet/train --port 50051 --threads 32", RunServeCommand},
      {"train", "",
       "dnn-group trainer: this host's ranks, fed by the data servers (image classification; "
       "segmentation and detection datasets are trained by your own loop over the Python "
       "loader, examples/pytorch)",
       Flags({FlagGroup{"data_servers", "data_servers_file", "data_servers_dns", "ranks"},
              kTrainingFlags, FlagGroup{"dnn_hosts", "current_host", "master_addr", "master_port"},
              kTlsClientFlags}),
       "heterodl train --data-servers cpu1:50051,cpu2:50051 --ranks 8 --model resnet50",
       RunTrainCommand},
      {"local", "",
       "a whole heterogeneous job on this machine: --servers data servers and --ranks ranks",
       Flags({FlagGroup{"dataset", "servers", "data_servers", "ranks", "threads"},
              kObjectStorageFlags, kTfRecordFlags, kPythonDatasetFlags, kTrainingFlags,
              FlagGroup{"auth_token_file", "tls_ca", "tls_cert", "tls_key"}}),
       "heterodl local --dataset data/sample --servers 2 --ranks 2 --epochs 1", RunLocalCommand},
      {"cluster", "",
       "print the cluster view this host resolves (who serves, who trains, the leader)",
       Flags({kClusterFlags, FlagGroup{"port", "json"}}), "heterodl cluster --json",
       RunClusterCommand},
      {"dataset", "sample DIR | index PATH",
       "sample: write the built-in sample dataset (photos under classes, or with --task "
       "segmentation images and masks, with --task detection images and COCO boxes) to an empty "
       "DIR; index: read tar shards or TFRecord files (local or s3://) once and save their index "
       "beside them, so that servers starting on them read it instead of every file",
       Flags({FlagGroup{"images", "seed", "formats", "task", "sample_size", "source_photos",
                        "overwrite"},
              kObjectStorageFlags, kTfRecordFlags}),
       "heterodl dataset sample data/mixed --images 2000 --formats mixed", RunDatasetCommand},
      {"status", "HOST:PORT...",
       "live statistics of data servers: dataset, pipeline, recent images/s, capacity, streams; "
       "with --demand, the data hosts needed for --max-stall",
       Flags({FlagGroup{"json", "demand", "max_stall", "data_servers_file", "data_servers_dns"},
              kTlsClientFlags}),
       "heterodl status cpu1:50051 cpu2:50051 --demand 9000", RunStatusCommand},
      {"bench", "augment|transport|step|feed",
       "benchmarks: decode + augment per core, transport GB/s, step time and cost, feed as a "
       "trainer sees it",
       Flags({FlagGroup{"dataset",        "pipeline",
                        "threads",        "worker_nice",
                        "batch_size",     "seconds",
                        "rounds",         "no_peer",
                        "python",         "python_dataset",
                        "python_path",    "python_workers",
                        "peers",          "tensorflow_python",
                        "connections",    "batch_sizes",
                        "model",          "steps",
                        "device_step_ms", "report",
                        "prices",         "gpu_instance",
                        "data_instance",  "json"},
              kObjectStorageFlags, FlagGroup{"shuffle_block_shards"}}),
       "heterodl bench feed --dataset data/sample --threads 2", RunBenchCommand},
      {"plan",
       "",
       "which data instances to add to a GPU instance, and why",
       {"gpu_instance", "data_instance", "images_per_sec_per_core", "image_size", "batch_size",
        "device_step_ms", "max_stall", "max_data_instances", "spot", "interruption_overhead",
        "prices", "json"},
       "heterodl plan --gpu-instance ml.p4d.24xlarge --images-per-sec-per-core 600",
       RunPlanCommand},
  };
  return *commands;
}

const CommandInfo* FindCommand(absl::string_view name) {
  for (const CommandInfo& command : Commands()) {
    if (name == command.name) {
      return &command;
    }
  }
  return nullptr;
}

std::string SuggestCommand(absl::string_view word) {
  std::vector<std::string> names;
  for (const CommandInfo& command : Commands()) {
    names.emplace_back(command.name);
  }
  const std::string nearest = NearestName(word, names);
  return nearest.empty() ? "" : absl::StrCat(" (did you mean '", nearest, "'?)");
}

std::string ProgramUsage() {
  std::string usage =
      "heterogeneous data-parallel training\n\n"
      "usage: heterodl [COMMAND] [FLAGS] [ARGS]\n\ncommands:\n";
  for (const CommandInfo& command : Commands()) {
    const std::string head = absl::StrCat(command.name, " ", command.arguments);
    absl::StrAppendFormat(&usage, "  %-34s %s\n", head, command.summary);
  }
  absl::StrAppend(&usage,
                  "\n'heterodl help COMMAND' (or 'heterodl COMMAND --help') lists a command's "
                  "flags; 'heterodl --helpfull' every flag; 'heterodl --version' the build.");
  return usage;
}

namespace {

// Flags whose value when not given is decided later (a cluster's port, the
// environment), their stored default a "not given" mark: what help shows.
constexpr std::pair<const char*, const char*> kEffectiveDefaults[] = {
    {"port", "50051"},
    {"metrics_port", "$HETERODL_METRICS_PORT, else off"},
    {"slurm_data_component", "0"},
    {"rank", "set by the launcher"},
};

// One flag's lines in a help text; nothing for a flag Abseil does not know.
std::string FlagHelp(const char* name) {
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr) {
    return "";  // flagfile is Abseil's, always there
  }
  std::string fallback = flag->DefaultValue();
  for (const auto& [flag_name, effective] : kEffectiveDefaults) {
    if (absl::string_view(name) == flag_name) {
      fallback = effective;
    }
  }
  return absl::StrFormat("  %s (default: %s)\n      %s\n", DashedFlag(name),
                         fallback.empty() ? "none" : absl::StrCat("'", fallback, "'"),
                         flag->Help());
}

}  // namespace

std::string CommandHelp(const CommandInfo& command) {
  std::string help = absl::StrCat("usage: heterodl ", command.name, " ", command.arguments,
                                  command.arguments[0] == '\0' ? "" : " ", "[FLAGS]\n\n",
                                  command.summary, "\n\nflags:\n");
  std::vector<const char*> flags = command.flags;
  flags.insert(flags.end(), std::begin(kCommonFlags), std::end(kCommonFlags));
  for (const char* name : flags) {
    absl::StrAppend(&help, FlagHelp(name));
  }
  absl::StrAppend(&help, "\nexample:\n  ", command.example, "\n");
  return help;
}

std::string AllFlagsHelp() {
  std::set<std::string> names(std::begin(kCommonFlags), std::end(kCommonFlags));
  for (const CommandInfo& command : Commands()) {
    names.insert(command.flags.begin(), command.flags.end());
  }
  std::string help = absl::StrCat(ProgramUsage(),
                                  "\n\nevery flag (each command's own are in "
                                  "'heterodl help COMMAND'):\n");
  for (const std::string& name : names) {
    absl::StrAppend(&help, FlagHelp(name.c_str()));
  }
  return help;
}

bool CommandTakesFlag(const CommandInfo& command, absl::string_view flag) {
  if (std::find(std::begin(kCommonFlags), std::end(kCommonFlags), flag) != std::end(kCommonFlags)) {
    return true;
  }
  return std::any_of(command.flags.begin(), command.flags.end(),
                     [flag](const char* name) { return flag == name; });
}

}  // namespace heterodl
