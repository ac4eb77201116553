#include "bench/augment_bench.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "augment/jpeg_decoder.h"
#include "augment/pipeline.h"
#include "augment/transforms.h"
#include "google/protobuf/util/json_util.h"
#include "heterodl/bench.pb.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"
#include "opencv2/imgproc.hpp"
#include "src/common/process/child_process.h"
#include "src/common/counter_rng.h"
#include "src/common/proto_json.h"
#include "src/common/read_file.h"
#include "src/common/status_macros.h"
#include "src/data/dataset.h"

namespace heterodl {
namespace {

// One image, end to end; returns false on a decode error.
using Worker = std::function<bool(const std::string& encoded, uint64_t index, uint8_t* out)>;

void PinToCore(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core % std::max(1, static_cast<int>(std::thread::hardware_concurrency())), &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

// Images per second of `threads` threads, each pinned to its own core,
// cycling over the files (each thread from a different offset) for `seconds`.
double MeasureRate(const std::vector<std::string>& files, const Worker& worker, size_t out_bytes,
                   int threads, double seconds) {
  std::atomic<bool> stop{false};
  std::vector<uint64_t> counts(threads, 0);
  std::vector<std::thread> pool;
  const absl::Time start = absl::Now();
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      PinToCore(t);
      std::vector<uint8_t> out(out_bytes);
      uint64_t i = static_cast<uint64_t>(t) * files.size() / threads;
      while (!stop.load(std::memory_order_relaxed)) {
        worker(files[i % files.size()], i, out.data());
        ++i;
        ++counts[t];
      }
    });
  }
  absl::SleepFor(absl::Seconds(seconds));
  stop = true;
  for (std::thread& thread : pool) thread.join();
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  uint64_t total = 0;
  for (uint64_t count : counts) total += count;
  return total / elapsed;
}

// "Plain OpenCV": imdecode of the whole image, then the same random crop,
// cv::resize with its default (bilinear) and flip, no colour conversion. Only
// for random_resized_crop specs.
Worker OpenCvBaseline(int size) {
  return [size](const std::string& encoded, uint64_t index, uint8_t* out) {
    const cv::Mat buffer(1, static_cast<int>(encoded.size()), CV_8UC1,
                         const_cast<char*>(encoded.data()));
    cv::Mat image = cv::imdecode(buffer, cv::IMREAD_COLOR);
    if (image.empty()) return false;
    CounterRng rng(0, {kStreamAugment, 0, static_cast<uint32_t>(index)});
    const cv::Rect crop =
        RandomResizedCropRect(image.cols, image.rows, {0.08, 1.0}, {3.0 / 4, 4.0 / 3}, rng);
    cv::Mat destination(size, size, CV_8UC3, out);
    cv::resize(image(crop), destination, {size, size});  // OpenCV's default: bilinear
    if (rng.NextDouble() < 0.5) cv::flip(destination, destination, 1);
    return true;
  };
}

absl::StatusOr<double> RunPeer(const AugmentBenchOptions& options, const std::string& file_list,
                               const std::string& spec) {
  const std::string out = absl::StrCat(file_list, ".peer.json");
  ASSIGN_OR_RETURN(
      ChildProcess peer,
      ChildProcess::Spawn({options.python, options.peer_script, "--files", file_list, "--pipeline",
                           spec, "--seconds", absl::StrCat(options.seconds), "--core", "0", "--out",
                           out}));
  const int code = peer.Wait();
  if (code != 0) {
    return absl::UnavailableError(absl::StrCat("the torchvision peer (", options.python, " ",
                                               options.peer_script, ") exited with ", code,
                                               "; run with --no-peer to skip it"));
  }
  ASSIGN_OR_RETURN(std::string json, ReadFileToString(out));
  v1::PeerResult result;
  if (!google::protobuf::util::JsonStringToMessage(json, &result).ok()) {
    return absl::DataLossError(absl::StrCat("unreadable peer result: ", json));
  }
  return result.images_per_sec();
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

std::string FormatTable(const v1::AugmentBenchReport& report) {
  std::string text = absl::StrFormat(
      "augment benchmark: %d files from %s (mean %.0fx%.0f px)\n"
      "pipeline: %s\n%d rounds of %.1f s each, one core per run (median shown)\n\n",
      report.files(), report.dataset(), report.mean_width(), report.mean_height(),
      report.pipeline(), report.rounds(), report.seconds_per_run());
  absl::StrAppendFormat(&text, "  %-34s %9.0f images/s per core\n", "heterodl",
                        report.heterodl_images_per_sec_per_core());
  if (report.torchvision_images_per_sec_per_core() > 0) {
    absl::StrAppendFormat(&text, "  %-34s %9.0f images/s per core   heterodl is %.2fx\n",
                          "torchvision + PIL (peer)", report.torchvision_images_per_sec_per_core(),
                          report.ratio_vs_torchvision());
  }
  if (report.opencv_images_per_sec_per_core() > 0) {
    absl::StrAppendFormat(&text, "  %-34s %9.0f images/s per core   heterodl is %.2fx\n",
                          "OpenCV imdecode + same crop", report.opencv_images_per_sec_per_core(),
                          report.ratio_vs_opencv());
  }
  absl::StrAppend(&text, "\n  thread scaling:\n");
  for (const v1::ThreadScaling& row : report.scaling()) {
    absl::StrAppendFormat(&text, "    %2d thread(s) %9.0f images/s   efficiency %.2f\n",
                          row.threads(), row.images_per_sec(), row.efficiency());
  }
  return text;
}

// One image through `pipeline`, as a server's worker runs it.
Worker PipelineWorker(const Pipeline& pipeline) {
  return [&pipeline](const std::string& encoded, uint64_t index, uint8_t* out) {
    return pipeline.Run(encoded, {0, 0, index}, out).ok();
  };
}

}  // namespace

absl::StatusOr<double> MeasureEngineRate(const std::string& dataset_path,
                                         const std::string& pipeline_spec, int threads,
                                         double seconds, int max_files) {
  RunPipelinesOnCallerThreadsOnly();
  ASSIGN_OR_RETURN(Dataset dataset, Dataset::Open(dataset_path));
  ASSIGN_OR_RETURN(Pipeline pipeline, Pipeline::Parse(pipeline_spec.empty()
                                                          ? std::string(kDefaultPipeline)
                                                          : pipeline_spec));
  // Spread over the whole dataset: its first files may be one class's.
  std::vector<std::string> files;
  const size_t count = std::min<size_t>(dataset.size(), static_cast<size_t>(max_files));
  for (size_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(std::string bytes, dataset.ReadSample(i * dataset.size() / count));
    files.push_back(std::move(bytes));
  }
  return MeasureRate(files, PipelineWorker(pipeline), pipeline.output_bytes(), threads, seconds);
}

namespace {

// The benchmark's files: their bytes in memory (it times decoding, not the
// disk), their paths in a list for the peer, their mean size.
struct BenchFiles {
  std::vector<std::string> bytes;
  std::string list_path;
  double mean_width = 0;
  double mean_height = 0;
};

absl::StatusOr<BenchFiles> LoadFiles(const Dataset& dataset, const AugmentBenchOptions& options) {
  BenchFiles files;
  files.list_path =
      (std::filesystem::temp_directory_path() / absl::StrCat("heterodl-bench-", getpid(), ".txt"))
          .string();
  std::ofstream list(files.list_path);
  double width_sum = 0, height_sum = 0;
  const size_t count = std::min<size_t>(dataset.size(), static_cast<size_t>(options.max_files));
  for (size_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(std::string bytes, dataset.ReadSample(i));
    absl::StatusOr<JpegHeader> header = ReadJpegHeader(bytes, int64_t{1} << 40);
    if (header.ok()) {
      width_sum += header->width;
      height_sum += header->height;
    }
    std::string path = dataset.sample(i).path;
    if (path.empty() || path.front() != '/') {
      path = (std::filesystem::path(options.dataset) / path).string();
    }
    list << path << "\n";
    files.bytes.push_back(std::move(bytes));
  }
  const double n = static_cast<double>(std::max<size_t>(1, files.bytes.size()));
  files.mean_width = width_sum / n;
  files.mean_height = height_sum / n;
  return files;
}

// The OpenCV baseline implements torchvision's default RandomResizedCrop
// (and a flip): it is measured when the pipeline starts with exactly that.
bool HasOpenCvBaseline(const Pipeline& pipeline) {
  const std::string canonical = pipeline.CanonicalSpec();
  const std::string operations = canonical.substr(canonical.find('|') + 1);
  return operations.rfind(absl::StrCat("random_resized_crop(", pipeline.output_width(),
                                       ",scale=0.08:1,ratio=0.75:1.33333)"),
                          0) == 0;
}

// One core each, the contenders alternated over the rounds so that drifts
// in the machine's speed hit all alike; medians into the report.
absl::Status MeasureOneCore(const AugmentBenchOptions& options, const std::string& spec,
                            const Pipeline& pipeline, const BenchFiles& files,
                            v1::AugmentBenchReport& report) {
  const Worker ours_worker = PipelineWorker(pipeline);
  const Worker baseline = OpenCvBaseline(pipeline.output_width());
  const bool has_baseline = HasOpenCvBaseline(pipeline);
  std::vector<double> ours, peer, opencv;
  for (int round = 0; round < options.rounds; ++round) {
    ours.push_back(
        MeasureRate(files.bytes, ours_worker, pipeline.output_bytes(), 1, options.seconds));
    if (options.peer) {
      ASSIGN_OR_RETURN(double rate, RunPeer(options, files.list_path, spec));
      peer.push_back(rate);
    }
    if (has_baseline) {
      opencv.push_back(
          MeasureRate(files.bytes, baseline, pipeline.output_bytes(), 1, options.seconds));
    }
  }
  const double one_core = Median(ours);
  report.set_heterodl_images_per_sec_per_core(one_core);
  if (!peer.empty()) {
    report.set_torchvision_images_per_sec_per_core(Median(peer));
    report.set_ratio_vs_torchvision(one_core / Median(peer));
  }
  if (!opencv.empty()) {
    report.set_opencv_images_per_sec_per_core(Median(opencv));
    report.set_ratio_vs_opencv(one_core / Median(opencv));
  }
  return absl::OkStatus();
}

void MeasureScaling(const AugmentBenchOptions& options, const Pipeline& pipeline,
                    const BenchFiles& files, v1::AugmentBenchReport& report) {
  const double one_core = report.heterodl_images_per_sec_per_core();
  const int max_threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  for (int threads = 1; threads <= max_threads; ++threads) {
    const double rate = threads == 1 ? one_core
                                     : MeasureRate(files.bytes, PipelineWorker(pipeline),
                                                   pipeline.output_bytes(), threads,
                                                   options.seconds);
    v1::ThreadScaling* row = report.add_scaling();
    row->set_threads(threads);
    row->set_images_per_sec(rate);
    row->set_efficiency(rate / (threads * one_core));
  }
}

}  // namespace

absl::StatusOr<std::string> RunAugmentBench(const AugmentBenchOptions& options) {
  RunPipelinesOnCallerThreadsOnly();
  ASSIGN_OR_RETURN(Dataset dataset, Dataset::Open(options.dataset));
  const std::string spec =
      options.pipeline.empty() ? std::string(kDefaultPipeline) : options.pipeline;
  ASSIGN_OR_RETURN(Pipeline pipeline, Pipeline::Parse(spec));
  ASSIGN_OR_RETURN(const BenchFiles files, LoadFiles(dataset, options));
  v1::AugmentBenchReport report;
  report.set_dataset(options.dataset);
  report.set_files(static_cast<uint32_t>(files.bytes.size()));
  report.set_mean_width(files.mean_width);
  report.set_mean_height(files.mean_height);
  report.set_pipeline(pipeline.CanonicalSpec());
  report.set_seconds_per_run(options.seconds);
  report.set_rounds(options.rounds);
  const absl::Status measured = MeasureOneCore(options, spec, pipeline, files, report);
  std::filesystem::remove(files.list_path);
  std::filesystem::remove(files.list_path + ".peer.json");
  RETURN_IF_ERROR(measured);
  MeasureScaling(options, pipeline, files, report);
  if (!options.json) return FormatTable(report);
  return ToJson(report);
}

}  // namespace heterodl
