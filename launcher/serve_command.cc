// `heterodl serve`: the data-group server.
#include <string.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "launcher/commands.h"
#include "launcher/flag_checks.h"
#include "launcher/flags.h"
#include "src/common/log.h"
#include "src/common/net/host_port.h"
#include "src/common/status_macros.h"
#include "src/metrics/metrics_endpoint.h"
#include "src/metrics/server_metrics.h"
#include "src/server/data_server.h"
#include "src/storage/object_url.h"
#include "src/storage/s3_client.h"

namespace heterodl {
namespace {

// Written to a temporary name and renamed, so a reader never sees a partial
// port number.
bool WritePortFile(const std::string& path, int port) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream file(temporary, std::ios::trunc);
    if (!(file << port << "\n")) {
      return false;
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  return !error;
}

}  // namespace

namespace {

// Each group of serve's flags, into the struct it sets (one function each,
// so a flag is mapped in one place).
absl::StatusOr<PipelineOptions> DecodingFromFlags() {
  PipelineOptions decoding;
  decoding.max_pixels = absl::GetFlag(FLAGS_max_pixels);
  decoding.strict_decode = absl::GetFlag(FLAGS_strict_decode);
  decoding.mask_ignore_index = absl::GetFlag(FLAGS_ignore_index);
  decoding.min_box_visibility = absl::GetFlag(FLAGS_min_box_visibility);
  if (decoding.max_pixels < 1) {
    return absl::InvalidArgumentError("--max-pixels must be >= 1");
  }
  if (!(decoding.min_box_visibility >= 0 && decoding.min_box_visibility <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "serve: --min-box-visibility must be in [0, 1], got ", decoding.min_box_visibility));
  }
  return decoding;
}

RequestLimits RequestLimitsFromFlags() {
  RequestLimits requests;
  requests.memory_budget_bytes =
      static_cast<uint64_t>(std::max<int64_t>(0, absl::GetFlag(FLAGS_max_memory_mb))) << 20;
  requests.max_sample_pixel_operations =
      static_cast<double>(absl::GetFlag(FLAGS_max_pipeline_cost)) * 1e6;
  return requests;
}

absl::StatusOr<StreamPolicy> StreamPolicyFromFlags() {
  StreamPolicy streams;
  streams.max_streams = absl::GetFlag(FLAGS_max_streams);
  if (streams.max_streams < 1) {
    return absl::InvalidArgumentError("--max-streams must be >= 1");
  }
  streams.max_stream_bytes =
      static_cast<uint64_t>(std::max<int64_t>(1, absl::GetFlag(FLAGS_max_stream_mb))) << 20;
  streams.max_streams_per_host = absl::GetFlag(FLAGS_max_streams_per_host);
  streams.unread_timeout = absl::GetFlag(FLAGS_unread_timeout);
  return streams;
}

}  // namespace

absl::StatusOr<std::optional<S3Options>> S3OptionsFromFlags(const std::string& dataset) {
  if (!IsObjectUrl(dataset) && !IsObjectUrl(absl::GetFlag(FLAGS_image_root))) {
    return std::nullopt;
  }
  S3Options s3 = S3OptionsFromEnvironment(ProcessEnvironment());
  if (!absl::GetFlag(FLAGS_s3_endpoint).empty()) {
    s3.endpoint = absl::GetFlag(FLAGS_s3_endpoint);
  }
  if (!absl::GetFlag(FLAGS_s3_region).empty()) {
    s3.region = absl::GetFlag(FLAGS_s3_region);
  }
  const std::string addressing = absl::GetFlag(FLAGS_s3_addressing);
  if (addressing == "path") {
    s3.addressing = S3Options::Addressing::kPath;
  } else if (addressing == "virtual") {
    s3.addressing = S3Options::Addressing::kVirtualHosted;
  } else if (addressing != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("--s3-addressing must be auto, path or virtual, got '", addressing, "'"));
  }
  s3.unsigned_requests = absl::GetFlag(FLAGS_s3_no_sign);
  return s3;
}

std::vector<std::string> ObjectStorageServeArguments() {
  return {absl::StrCat("--s3_endpoint=", absl::GetFlag(FLAGS_s3_endpoint)),
          absl::StrCat("--s3_region=", absl::GetFlag(FLAGS_s3_region)),
          absl::StrCat("--s3_addressing=", absl::GetFlag(FLAGS_s3_addressing)),
          absl::StrCat("--s3_no_sign=", absl::GetFlag(FLAGS_s3_no_sign) ? "true" : "false"),
          absl::StrCat("--cache_dir=", absl::GetFlag(FLAGS_cache_dir)),
          absl::StrCat("--cache_mb=", absl::GetFlag(FLAGS_cache_mb)),
          absl::StrCat("--read_chunk_mb=", absl::GetFlag(FLAGS_read_chunk_mb)),
          absl::StrCat("--chunk_memory_mb=", absl::GetFlag(FLAGS_chunk_memory_mb))};
}

absl::StatusOr<DatasetLimits> DatasetLimitsFromFlags(const std::string& dataset) {
  DatasetLimits files;
  ASSIGN_OR_RETURN(files.s3, S3OptionsFromFlags(dataset));
  files.max_file_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_max_file_mb)) << 20;
  files.root = absl::GetFlag(FLAGS_dataset_root);
  files.image_root = absl::GetFlag(FLAGS_image_root);
  files.mask_ignore_index = absl::GetFlag(FLAGS_ignore_index);
  files.cache_dir = absl::GetFlag(FLAGS_cache_dir);
  if (absl::GetFlag(FLAGS_cache_mb) < 1) {
    return absl::InvalidArgumentError("--cache-mb must be at least 1");
  }
  files.cache_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_cache_mb)) << 20;
  if (absl::GetFlag(FLAGS_read_chunk_mb) < 1 ||
      absl::GetFlag(FLAGS_chunk_memory_mb) < 4 * absl::GetFlag(FLAGS_read_chunk_mb)) {
    return absl::InvalidArgumentError(
        "--read-chunk-mb must be at least 1, and --chunk-memory-mb at least 4 chunks");
  }
  files.read_chunk_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_read_chunk_mb)) << 20;
  files.chunk_memory_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_chunk_memory_mb)) << 20;
  files.tfrecord.image = absl::GetFlag(FLAGS_tfrecord_image_key);
  files.tfrecord.label = absl::GetFlag(FLAGS_tfrecord_label_key);
  files.tfrecord.label_offset = absl::GetFlag(FLAGS_tfrecord_label_offset);
  files.tfrecord.mask = absl::GetFlag(FLAGS_tfrecord_mask_key);
  if (files.tfrecord.image.empty()) {
    return absl::InvalidArgumentError("--tfrecord-image-key must name a feature");
  }
  if (!files.tfrecord.mask.empty()) {
    files.tfrecord.label.clear();  // segmentation records: the mask is the target
  }
  return files;
}

absl::StatusOr<DataServerOptions> ServeOptionsFromFlags() {
  DataServerOptions options;
  options.dataset = absl::GetFlag(FLAGS_dataset);
  options.synthetic_samples = absl::GetFlag(FLAGS_synthetic);
  options.python.worker.dataset = absl::GetFlag(FLAGS_python_dataset);
  options.python.worker.python_path = absl::GetFlag(FLAGS_python_path);
  options.python.worker.python = PythonFlagOr("python3");
  options.python.workers = absl::GetFlag(FLAGS_python_workers);
  options.python.sample_timeout = absl::GetFlag(FLAGS_python_sample_timeout);
  if (!options.python.worker.dataset.empty()) {
    if (!options.dataset.empty() || options.synthetic_samples > 0) {
      return absl::InvalidArgumentError(
          "serve takes one of --dataset, --synthetic and --python-dataset");
    }
    if (!absl::GetFlag(FLAGS_pipeline).empty()) {
      return absl::InvalidArgumentError(
          "--pipeline does not apply to --python-dataset: its samples are what its "
          "__getitem__ returns (apply transforms there)");
    }
    if (options.python.workers < 0 || options.python.sample_timeout <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          "--python-workers must be >= 0 and --python-sample-timeout positive");
    }
  }
  if (options.dataset.empty() && options.synthetic_samples <= 0 &&
      options.python.worker.dataset.empty()) {
    return absl::InvalidArgumentError(
        "serve needs --dataset DIR (an image folder or a file list) or --python-dataset "
        "MODULE:CALLABLE");
  }
  options.pipeline = absl::GetFlag(FLAGS_pipeline);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.worker_nice = absl::GetFlag(FLAGS_worker_nice);
  if (options.worker_nice < 0 || options.worker_nice > 19) {
    return absl::InvalidArgumentError(
        absl::StrCat("serve: --worker-nice must be in [0, 19], got ", options.worker_nice));
  }
  ASSIGN_OR_RETURN(options.decoding, DecodingFromFlags());
  ASSIGN_OR_RETURN(options.files, DatasetLimitsFromFlags(absl::GetFlag(FLAGS_dataset)));
  options.requests = RequestLimitsFromFlags();
  ASSIGN_OR_RETURN(options.streams, StreamPolicyFromFlags());
  options.strict_dataset = absl::GetFlag(FLAGS_strict_dataset);
  ASSIGN_OR_RETURN(options.auth_token, AuthTokenFromFlags());
  options.tls = TlsFromFlags();
  options.pixel_port = absl::GetFlag(FLAGS_pixel_port);
  if (options.pixel_port < -1 || options.pixel_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("serve: --pixel-port must be -1 (off), 0 (any free port) or a port, got ",
                     options.pixel_port));
  }
  options.same_host_pixels = absl::GetFlag(FLAGS_same_host_pixels);
  options.idle_timeout = absl::GetFlag(FLAGS_idle_timeout);
  options.startup_timeout = absl::GetFlag(FLAGS_startup_timeout);
  const int port = absl::GetFlag(FLAGS_port) >= 0 ? absl::GetFlag(FLAGS_port) : 50051;
  options.address = absl::GetFlag(FLAGS_address).empty() ? absl::StrCat("0.0.0.0:", port)
                                                         : absl::GetFlag(FLAGS_address);
  return options;
}

namespace {

// Runs the server until it stops: on a signal, a Shutdown RPC or its own
// timeouts. `metrics_port` >= 0: its Prometheus metrics on that port too.
int Serve(const DataServerOptions& options, int metrics_port, StopSignal& stop) {
  absl::StatusOr<std::unique_ptr<DataServer>> server = DataServer::Start(options);
  if (!server.ok()) {
    LogError("cannot start the data server: %s", server.status().ToString());
    // A user's dataset that cannot be loaded is a usage error, as a bad flag;
    // so is a bucket or key that cannot be read (the status names the URL
    // and S3's code: NoSuchBucket, AccessDenied, ...).
    const bool python_dataset_refused =
        !options.python.worker.dataset.empty() &&
        (absl::IsFailedPrecondition(server.status()) || absl::IsUnavailable(server.status()));
    const bool objects_refused = IsObjectUrl(options.dataset);
    return python_dataset_refused || objects_refused ? kExitUsage : kExitFailure;
  }
  DataServer* running = server->get();
  const StopSignal::Subscription on_signal = stop.Subscribe([running](int signal) {
    // "SIGTERM": what a spot interruption or a pod deletion sends.
    const char* name = sigabbrev_np(signal);
    running->RequestStop(name != nullptr ? absl::StrCat("SIG", name)
                                         : absl::StrCat("signal ", signal));
  });
  // The port bound, not the "0" an address may have asked for.
  const absl::StatusOr<HostPort> asked = SplitHostPort(options.address);
  // Said at once: a server that leaves on its own later surprises no one.
  LogInfo(
      "listening on %s; leaving on its own if no client comes within %s "
      "(--startup-timeout) or none is connected for %s (--idle-timeout)",
      asked.ok() ? JoinHostPort(asked->host, running->port()) : options.address,
      absl::FormatDuration(options.startup_timeout), absl::FormatDuration(options.idle_timeout));
  // Declared after the server: it stops scraping before the server goes.
  std::unique_ptr<MetricsEndpoint> metrics;
  if (metrics_port >= 0) {
    const std::string host = asked.ok() ? asked->host : "0.0.0.0";
    absl::StatusOr<std::unique_ptr<MetricsEndpoint>> started = MetricsEndpoint::Start(
        host, metrics_port,
        [running] { return RenderServerMetrics(running->Stats(), HETERODL_VERSION); });
    if (!started.ok()) {
      LogError("%s", std::string(started.status().message()));
      running->RequestStop("metrics endpoint");
      running->Wait().IgnoreError();
      return kExitFailure;
    }
    metrics = *std::move(started);
    LogInfo("Prometheus metrics at http://%s/metrics", JoinHostPort(host, metrics->port()));
  }
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty() && !WritePortFile(port_file, running->port())) {
    LogError("cannot write the port file '%s'", port_file);
    running->RequestStop("port file");
    running->Wait().IgnoreError();
    return kExitFailure;
  }
  absl::Status ended = running->Wait();
  if (!ended.ok()) {
    LogError("data server failed: %s", ended.ToString());
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

int RunServeCommand(const CommandContext& context) {
  StopSignal& stop = context.stop;
  absl::StatusOr<DataServerOptions> options = ServeOptionsFromFlags();
  if (!options.ok()) {
    LogError("%s", std::string(options.status().message()));
    return kExitUsage;
  }
  const absl::StatusOr<int> metrics_port = MetricsPortFromFlags("serve");
  if (!metrics_port.ok()) {
    LogError("%s", std::string(metrics_port.status().message()));
    return kExitUsage;
  }
  return Serve(*options, *metrics_port, stop);
}

}  // namespace heterodl
