#include "bench/feed_bench.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "bench/augment_bench.h"
#include "bench/peer_versions.h"
#include "google/protobuf/util/json_util.h"
#include "heterodl/bench.pb.h"
#include "src/client/remote_loader.h"
#include "src/common/process/child_process.h"
#include "src/common/proto_json.h"
#include "src/common/read_file.h"
#include "src/common/status_macros.h"
#include "src/data/dataset.h"

namespace heterodl {
namespace {

std::string TempPath(absl::string_view what) {
  return (std::filesystem::temp_directory_path() /
          absl::StrCat("heterodl-feed-", getpid(), "-", what))
      .string();
}

int Threads(const FeedBenchOptions& options) {
  return options.threads > 0 ? options.threads
                             : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// `heterodl serve` on the dataset, on a free loopback port.
class FeedServer {
 public:
  static absl::StatusOr<FeedServer> Start(const FeedBenchOptions& options) {
    const std::string port_file = TempPath("port");
    std::filesystem::remove(port_file);
    std::vector<std::string> arguments = {options.heterodl,    "serve",
                                          "--dataset",         options.dataset,
                                          "--address",         "127.0.0.1:0",
                                          "--port_file",       port_file,
                                          "--threads",         absl::StrCat(Threads(options)),
                                          "--worker_nice",     absl::StrCat(options.worker_nice),
                                          "--idle_timeout",    "60s",
                                          "--startup_timeout", "60s"};
    if (!options.pipeline.empty()) {
      arguments.push_back("--pipeline");
      arguments.push_back(options.pipeline);
    }
    arguments.insert(arguments.end(), options.serve_flags.begin(), options.serve_flags.end());
    ASSIGN_OR_RETURN(ChildProcess process, ChildProcess::Spawn(arguments));
    const std::optional<int> port = AwaitPortFile(process, port_file, absl::Seconds(60));
    std::filesystem::remove(port_file);
    if (!port) {
      return absl::UnavailableError("the data server did not start");
    }
    return FeedServer(std::move(process), absl::StrCat("127.0.0.1:", *port));
  }

  const std::string& address() const { return address_; }

  void Stop() {
    process_.Signal(SIGTERM);
    if (!process_.WaitFor(absl::Seconds(10))) {
      process_.Kill();
    }
  }

 private:
  FeedServer(ChildProcess process, std::string address)
      : process_(std::move(process)), address_(std::move(address)) {}

  ChildProcess process_;
  std::string address_;
};

double Mean(const std::vector<double>& values) {
  if (values.empty()) {
    return 0;
  }
  double sum = 0;
  for (double value : values) {
    sum += value;
  }
  return sum / static_cast<double>(values.size());
}

double Median(std::vector<double> values) {
  if (values.empty()) {
    return 0;
  }
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// The run with the median images/s.
v1::FeedRun MedianRun(std::vector<v1::FeedRun> runs) {
  std::sort(runs.begin(), runs.end(), [](const v1::FeedRun& a, const v1::FeedRun& b) {
    return a.images_per_sec() < b.images_per_sec();
  });
  return runs.empty() ? v1::FeedRun() : runs[runs.size() / 2];
}

double Max(const std::vector<double>& values) {
  return values.empty() ? 0 : *std::max_element(values.begin(), values.end());
}

// The loader's settings a run compares: today's, or one thing as it was.
struct LoaderVariant {
  bool prefetch_across_epochs = true;
  bool same_host_pixels = true;
};

// A trainer's loop over the loader: epochs one after another, each batch
// waited for, then (optionally) a modelled accelerator step. Runs at least
// three epochs and options.seconds. `world_size` > 1 makes rank 0's epochs
// short (one batch each when it is samples / batch).
absl::StatusOr<v1::FeedRun> DriveLoader(const FeedBenchOptions& options, const std::string& address,
                                        uint32_t world_size, LoaderVariant variant = {}) {
  RemoteLoaderOptions loader_options;
  loader_options.servers.fixed = {address};
  loader_options.batch_size = static_cast<uint32_t>(options.batch_size);
  loader_options.world_size = world_size;
  loader_options.drop_last = world_size > 1;
  loader_options.shuffle_block_shards = options.shuffle_block_shards;
  loader_options.pipeline = options.pipeline;
  loader_options.prefetch_across_epochs = variant.prefetch_across_epochs;
  loader_options.same_host_pixels = variant.same_host_pixels;
  loader_options.connect_timeout = absl::Seconds(60);
  ASSIGN_OR_RETURN(std::unique_ptr<RemoteLoader> loader, RemoteLoader::Connect(loader_options));
  const absl::Duration device_step = absl::Milliseconds(options.device_step_ms);
  std::vector<double> boundary_waits, inner_waits;
  int64_t images = 0;
  uint64_t batches = 0;
  absl::Time first_batch = absl::InfinitePast();
  uint32_t epoch = 0;
  for (;; ++epoch) {
    RETURN_IF_ERROR(loader->SetEpoch(epoch));
    for (int64_t k = 0;; ++k) {
      const absl::Time asked = absl::Now();
      ASSIGN_OR_RETURN(std::optional<Batch> batch, loader->Next());
      const absl::Time arrived = absl::Now();
      if (!batch) {
        break;
      }
      ++batches;
      if (epoch == 0 && k == 0) {
        first_batch = arrived;  // connections, the first build: not the feed
      } else {
        (k == 0 ? boundary_waits : inner_waits)
            .push_back(absl::ToDoubleMilliseconds(arrived - asked));
        images += batch->size();
      }
      if (device_step > absl::ZeroDuration()) {
        absl::SleepFor(device_step);
      }
    }
    if (epoch >= 2 && absl::Now() - first_batch >= absl::Seconds(options.seconds)) {
      break;
    }
  }
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - first_batch);
  const LoaderStats stats = loader->stats();
  v1::FeedRun run;
  run.set_epochs(epoch + 1);
  run.set_batches_per_epoch(static_cast<uint32_t>(loader->size()));
  run.set_batches(batches);
  run.set_images_per_sec(elapsed > 0 ? images / elapsed : 0);
  run.set_boundary_wait_ms_mean(Mean(boundary_waits));
  run.set_boundary_wait_ms_max(Max(boundary_waits));
  run.set_inner_wait_ms_mean(Mean(inner_waits));
  run.set_inner_wait_ms_median(Median(inner_waits));
  run.set_inner_wait_ms_max(Max(inner_waits));
  run.set_dropped(static_cast<uint64_t>(stats.dropped));
  run.set_window(static_cast<uint32_t>(stats.window));
  for (int depth : stats.depths) {
    run.add_depths(static_cast<uint32_t>(depth));
  }
  run.set_same_host_streams(static_cast<uint32_t>(stats.same_host_streams));
  return run;
}

// What one peer script measured (bench/peers/feed_*.py, which write a
// PeerResult as JSON to --out).
absl::StatusOr<v1::PeerResult> RunPythonConsumer(const std::string& python,
                                                 std::vector<std::string> arguments,
                                                 const std::string& python_path) {
  const std::string out = TempPath("peer.json");
  std::filesystem::remove(out);
  arguments.insert(arguments.begin(), python);
  arguments.push_back("--out");
  arguments.push_back(out);
  std::vector<std::string> environment;
  if (!python_path.empty()) {
    environment.push_back(absl::StrCat("PYTHONPATH=", python_path));
  }
  ASSIGN_OR_RETURN(ChildProcess peer, ChildProcess::Spawn(arguments, {.extra_env = environment}));
  const int code = peer.Wait();
  if (code != 0) {
    return absl::UnavailableError(
        absl::StrCat(arguments[1], " exited with ", code, " (see its output above)"));
  }
  ASSIGN_OR_RETURN(std::string json, ReadFileToString(out));
  std::filesystem::remove(out);
  v1::PeerResult result;
  if (!google::protobuf::util::JsonStringToMessage(json, &result).ok()) {
    return absl::DataLossError(absl::StrCat("unreadable peer result: ", json));
  }
  return result;
}

// The dataset's files, one path per line, for the peers.
absl::StatusOr<std::string> WriteFileList(const FeedBenchOptions& options, uint32_t* files) {
  ASSIGN_OR_RETURN(Dataset dataset, Dataset::Open(options.dataset, options.files));
  const std::string list = TempPath("files.txt");
  std::ofstream out(list);
  for (size_t i = 0; i < dataset.size(); ++i) {
    std::string path = dataset.sample(i).path;
    if (path.empty() || path.front() != '/') {
      path = (std::filesystem::path(options.dataset) / path).string();
    }
    out << path << "\t" << dataset.sample(i).label << "\n";
  }
  *files = static_cast<uint32_t>(dataset.size());
  if (!out.good()) {
    return absl::UnavailableError(absl::StrCat("cannot write ", list));
  }
  return list;
}

// TensorFlow for the tf.data peer, installed on first use.
absl::Status InstallPeers(const FeedBenchOptions& options) {
  const std::string setup = (std::filesystem::path(options.peers_dir) / "setup.sh").string();
  ASSIGN_OR_RETURN(ChildProcess installer, ChildProcess::Spawn({"/bin/bash", setup}));
  const int code = installer.Wait();
  if (code != 0) {
    return absl::UnavailableError(absl::StrCat(setup, " exited with ", code));
  }
  return absl::OkStatus();
}

absl::Status RunPeers(const FeedBenchOptions& options, const std::string& address,
                      const std::string& file_list, v1::FeedBenchReport& report) {
  // Without TensorFlow the tf.data row says why; the other rows are measured.
  const absl::Status tensorflow = InstallPeers(options);
  const std::string threads = absl::StrCat(Threads(options));
  const std::string batch = absl::StrCat(options.batch_size);
  const std::string seconds = absl::StrCat(options.seconds);
  const std::vector<std::string> common = {"--files",   file_list, "--batch-size", batch,
                                           "--workers", threads,   "--seconds",    seconds};
  auto script = [&](const char* name) {
    return (std::filesystem::path(options.peers_dir) / name).string();
  };
  // heterodl itself, consumed from Python like the peers are. A consumer
  // that fails is a row saying why; the others are still measured.
  std::vector<std::string> ours = {
      script("feed_heterodl.py"), "--server", address, "--batch-size", batch, "--seconds", seconds};
  const absl::StatusOr<v1::PeerResult> python =
      RunPythonConsumer(options.python, ours, options.python_path);
  const double python_rate = python.ok() ? python->images_per_sec() : 0;
  report.set_python_images_per_sec(python_rate);
  if (!python.ok()) {
    report.set_python_error(std::string(python.status().message()));
  } else {
    report.set_python_versions(VersionLine("heterodl RemoteDataLoader", *python));
  }
  struct Peer {
    const char* name;
    std::string python;
    std::vector<std::string> arguments;
    const char* note;
    absl::Status ready;  // what it needs installed
  };
  std::vector<Peer> peers = {
      {"PyTorch DataLoader, PIL",
       options.python,
       {script("feed_dataloader.py"), "--decoder", "pil"},
       "torchvision.transforms on PIL images, N worker processes"},
      {"PyTorch DataLoader, torchvision.io",
       options.python,
       {script("feed_dataloader.py"), "--decoder", "tensor"},
       "decode_image + transforms.v2 on uint8 tensors, N worker processes"},
      {"tf.data service (loopback)",
       options.tensorflow_python,
       {script("feed_tfdata_service.py")},
       "a dispatcher and a worker process, the consumer converting batches to NumPy",
       tensorflow},
  };
  for (Peer& peer : peers) {
    peer.arguments.insert(peer.arguments.end(), common.begin(), common.end());
    const absl::StatusOr<v1::PeerResult> result =
        peer.ready.ok() ? RunPythonConsumer(peer.python, peer.arguments, "")
                        : absl::StatusOr<v1::PeerResult>(peer.ready);
    v1::FeedPeer* row = report.add_peers();
    row->set_name(peer.name);
    row->set_note(peer.note);
    if (!result.ok()) {
      row->set_error(std::string(result.status().message()));
      continue;
    }
    const double rate = result->images_per_sec();
    row->set_images_per_sec(rate);
    row->set_heterodl_ratio(rate > 0 && python_rate > 0 ? python_rate / rate : 0);
    row->set_skipped_files(result->skipped_files());
    row->set_skipped(result->skipped());
    row->set_versions(VersionLine(peer.name, *result));
  }
  return absl::OkStatus();
}

std::string FormatRun(const char* title, const v1::FeedRun& run) {
  std::string depths;
  for (uint32_t depth : run.depths()) {
    absl::StrAppend(&depths, depths.empty() ? "" : ",", depth);
  }
  return absl::StrFormat(
      "  %-34s %8.0f images/s  %4d epochs x %4d batches\n"
      "  %-34s epoch boundary %7.1f ms mean %7.1f max | other steps %7.1f mean %7.1f median "
      "%7.1f max\n"
      "  %-34s window %d, depths %s, %d fetched ahead and dropped; pixels %s\n",
      title, run.images_per_sec(), run.epochs(), run.batches_per_epoch(),
      "waiting in Next():", run.boundary_wait_ms_mean(), run.boundary_wait_ms_max(),
      run.inner_wait_ms_mean(), run.inner_wait_ms_median(), run.inner_wait_ms_max(), "",
      run.window(), depths, run.dropped(),
      run.same_host_streams() > 0 ? "from shared memory" : "over a socket");
}

std::string FormatTable(const v1::FeedBenchReport& report) {
  std::string text = absl::StrFormat(
      "feed benchmark: %d files from %s, pipeline %s\n"
      "one server (%d threads, child process) -> RemoteLoader, batch %d, %s\n"
      "%d rounds of the runs below between engine measurements; medians, ratios within a "
      "round\n\n",
      report.files(), report.dataset(), report.pipeline().empty() ? "(default)" : report.pipeline(),
      report.threads(), report.batch_size(),
      report.device_step_ms() > 0
          ? absl::StrFormat("a modelled accelerator step of %.1f ms", report.device_step_ms())
          : std::string("the consumer taking batches as fast as they come"),
      report.rounds());
  absl::StrAppendFormat(&text, "  %-34s %8.0f images/s (same threads, in memory, no pipe)\n",
                        "decode + augment engine", report.engine_images_per_sec());
  absl::StrAppend(&text, FormatRun("delivered, long epochs", report.long_epochs()));
  absl::StrAppendFormat(&text, "  %-34s %8.2f\n", "pipeline efficiency",
                        report.pipeline_efficiency());
  absl::StrAppend(&text, FormatRun("delivered, one-batch epochs", report.one_batch_epochs()));
  absl::StrAppendFormat(&text, "  %-34s %8.2f of long epochs\n", "one-batch epochs",
                        report.one_batch_ratio());
  absl::StrAppend(&text, FormatRun("no prefetch across epochs (before)",
                                   report.without_cross_epoch_prefetch()));
  absl::StrAppend(&text, FormatRun("pixels over TCP loopback (before)", report.over_tcp()));
  absl::StrAppendFormat(&text, "  %-34s %8.2f\n", "its pipeline efficiency",
                        report.tcp_efficiency());
  if (report.peers_size() > 0) {
    absl::StrAppendFormat(&text,
                          "\n  system-level peers, same files and cores, Python consumers:\n");
    if (report.python_error().empty()) {
      absl::StrAppendFormat(&text, "  %-40s %8.0f images/s\n", "heterodl RemoteDataLoader",
                            report.python_images_per_sec());
    } else {
      absl::StrAppendFormat(&text, "  %-40s failed: %s\n", "heterodl RemoteDataLoader",
                            report.python_error());
    }
    for (const v1::FeedPeer& peer : report.peers()) {
      if (!peer.error().empty()) {
        absl::StrAppendFormat(&text, "  %-40s failed: %s\n", peer.name(), peer.error());
        continue;
      }
      absl::StrAppendFormat(&text, "  %-40s %8.0f images/s   heterodl is %.2fx   (%s)\n",
                            peer.name(), peer.images_per_sec(), peer.heterodl_ratio(), peer.note());
      if (peer.skipped_files() > 0) {
        absl::StrAppendFormat(&text, "  %-40s left out %d files: %s\n", "", peer.skipped_files(),
                              peer.skipped());
      }
    }
    absl::StrAppend(&text, "\n  versions:\n");
    if (!report.python_versions().empty()) {
      absl::StrAppend(&text, "    ", report.python_versions(), "\n");
    }
    for (const v1::FeedPeer& peer : report.peers()) {
      if (!peer.versions().empty()) {
        absl::StrAppend(&text, "    ", peer.versions(), "\n");
      }
    }
  }
  return text;
}

// What the rounds measured, each figure once per round.
struct Rounds {
  std::vector<double> engine_rates, efficiencies, one_batch_ratios, tcp_efficiencies;
  std::vector<v1::FeedRun> long_runs, one_batch_runs, no_prefetch_runs, tcp_runs;

  // Ratios are taken within a round, against the engine's rate averaged
  // from the measurements before and after it.
  void Add(double engine, v1::FeedRun long_run, v1::FeedRun one_batch, v1::FeedRun no_prefetch,
           v1::FeedRun over_tcp) {
    engine_rates.push_back(engine);
    if (engine > 0) {
      efficiencies.push_back(long_run.images_per_sec() / engine);
      tcp_efficiencies.push_back(over_tcp.images_per_sec() / engine);
    }
    tcp_runs.push_back(std::move(over_tcp));
    if (long_run.images_per_sec() > 0) {
      one_batch_ratios.push_back(one_batch.images_per_sec() / long_run.images_per_sec());
    }
    long_runs.push_back(std::move(long_run));
    one_batch_runs.push_back(std::move(one_batch));
    no_prefetch_runs.push_back(std::move(no_prefetch));
  }
  // The medians over rounds.
  void Report(v1::FeedBenchReport& report) const {
    report.set_engine_images_per_sec(Median(engine_rates));
    *report.mutable_long_epochs() = MedianRun(long_runs);
    *report.mutable_one_batch_epochs() = MedianRun(one_batch_runs);
    *report.mutable_without_cross_epoch_prefetch() = MedianRun(no_prefetch_runs);
    report.set_pipeline_efficiency(Median(efficiencies));
    report.set_one_batch_ratio(Median(one_batch_ratios));
    *report.mutable_over_tcp() = MedianRun(tcp_runs);
    report.set_tcp_efficiency(Median(tcp_efficiencies));
  }
};

v1::FeedBenchReport NewReport(const FeedBenchOptions& options, uint32_t files) {
  v1::FeedBenchReport report;
  report.set_dataset(options.dataset);
  report.set_pipeline(options.pipeline);
  report.set_threads(static_cast<uint32_t>(Threads(options)));
  report.set_batch_size(static_cast<uint32_t>(options.batch_size));
  report.set_device_step_ms(options.device_step_ms);
  report.set_rounds(static_cast<uint32_t>(std::max(1, options.rounds)));
  report.set_files(files);
  return report;
}

// This machine's speed drifts (shared hosts do): each round's loader runs sit
// between two measurements of the engine, which runs while the server idles
// (no client). `one_batch_world` ranks make every epoch one batch.
absl::Status RunRounds(const FeedBenchOptions& options, const std::string& server,
                       uint32_t one_batch_world, Rounds& rounds) {
  // Warm-up: the server's first allocations, the files into the page cache.
  FeedBenchOptions warm_up = options;
  warm_up.seconds = 1;
  RETURN_IF_ERROR(DriveLoader(warm_up, server, 1).status());
  const auto engine_rate = [&] {
    return MeasureEngineRate(options.dataset, options.files, options.pipeline, Threads(options),
                             std::min(options.seconds, 3.0));
  };
  ASSIGN_OR_RETURN(double engine_before, engine_rate());
  for (int round = 0; round < std::max(1, options.rounds); ++round) {
    ASSIGN_OR_RETURN(v1::FeedRun long_run, DriveLoader(options, server, 1));
    ASSIGN_OR_RETURN(v1::FeedRun one_batch, DriveLoader(options, server, one_batch_world));
    ASSIGN_OR_RETURN(v1::FeedRun no_prefetch,
                     DriveLoader(options, server, 1, {.prefetch_across_epochs = false}));
    ASSIGN_OR_RETURN(v1::FeedRun over_tcp,
                     DriveLoader(options, server, 1, {.same_host_pixels = false}));
    ASSIGN_OR_RETURN(const double engine_after, engine_rate());
    rounds.Add((engine_before + engine_after) / 2, std::move(long_run), std::move(one_batch),
               std::move(no_prefetch), std::move(over_tcp));
    engine_before = engine_after;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> RunFeedBench(const FeedBenchOptions& options) {
  uint32_t files = 0;
  ASSIGN_OR_RETURN(const std::string file_list, WriteFileList(options, &files));
  v1::FeedBenchReport report = NewReport(options, files);
  const uint32_t one_batch_world =
      std::max<uint32_t>(1, files / static_cast<uint32_t>(options.batch_size));

  ASSIGN_OR_RETURN(FeedServer server, FeedServer::Start(options));
  Rounds rounds;
  absl::Status status = RunRounds(options, server.address(), one_batch_world, rounds);
  if (status.ok() && options.peers) {
    status = RunPeers(options, server.address(), file_list, report);
  }
  server.Stop();
  std::filesystem::remove(file_list);
  RETURN_IF_ERROR(status);
  rounds.Report(report);
  if (!options.json) {
    return FormatTable(report);
  }
  return ToJson(report);
}

}  // namespace heterodl
