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
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "augment/decode.h"
#include "augment/image_format.h"
#include "augment/library_versions.h"
#include "augment/pipeline.h"
#include "augment/png_decoder.h"
#include "augment/region_decode.h"
#include "augment/transforms.h"
#include "bench/peer_versions.h"
#include "google/protobuf/util/json_util.h"
#include "heterodl/bench.pb.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"
#include "opencv2/imgproc.hpp"
#include "src/common/counter_rng.h"
#include "src/common/process/child_process.h"
#include "src/common/proto_json.h"
#include "src/common/read_file.h"
#include "src/common/status_macros.h"
#include "src/data/dataset.h"

namespace heterodl {
namespace {

// One sample as read from the dataset: an image, and with a segmentation
// dataset its mask.
struct EncodedSample {
  std::string image;
  std::string mask;  // empty: none
  // A detection dataset's: the sample's boxes, moved with the image.
  bool detection = false;
  std::vector<Box> boxes;
};

// One sample, end to end; returns false on a decode error. `out` holds the
// image, then (with a mask) the mask's ids.
using Worker = std::function<bool(const EncodedSample& sample, uint64_t index, uint8_t* out)>;

void PinToCore(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core % std::max(1, static_cast<int>(std::thread::hardware_concurrency())), &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

// Images per second of `threads` threads, each pinned to its own core,
// cycling over the files (each thread from a different offset) for `seconds`.
double MeasureRate(const std::vector<EncodedSample>& files, const Worker& worker, size_t out_bytes,
                   int threads, double seconds) {
  std::atomic<bool> stop{false};
  std::vector<uint64_t> counts(threads, 0);
  std::vector<std::thread> pool;
  const absl::Time start = absl::Now();
  pool.reserve(threads);
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
  for (std::thread& thread : pool) {
    thread.join();
  }
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  uint64_t total = 0;
  for (uint64_t count : counts) {
    total += count;
  }
  return total / elapsed;
}

// "Plain OpenCV": imdecode of the whole image, then the same random crop,
// cv::resize with its default (bilinear) and flip, no colour conversion. Only
// for random_resized_crop specs.
Worker OpenCvBaseline(int size) {
  return [size](const EncodedSample& sample, uint64_t index, uint8_t* out) {
    const cv::Mat buffer(1, static_cast<int>(sample.image.size()), CV_8UC1,
                         const_cast<char*>(sample.image.data()));
    cv::Mat image = cv::imdecode(buffer, cv::IMREAD_COLOR);
    if (image.empty()) {
      return false;
    }
    CounterRng rng(0, {kStreamAugment, 0, static_cast<uint32_t>(index)});
    const cv::Rect crop =
        RandomResizedCropRect(image.cols, image.rows, {0.08, 1.0}, {3.0 / 4, 4.0 / 3}, rng);
    cv::Mat destination(size, size, CV_8UC3, out);
    cv::resize(image(crop), destination, {size, size});  // OpenCV's default: bilinear
    if (rng.NextDouble() < 0.5) {
      cv::flip(destination, destination, 1);
    }
    return true;
  };
}

// One peer process (`decoder`: pil or tensor, run by `python`) over the
// file list: its rate over all files and per group; with `masks`, over
// image + mask pairs.
absl::StatusOr<v1::PeerResult> RunPeer(const AugmentBenchOptions& options,
                                       const std::string& python, const std::string& file_list,
                                       const std::string& spec, const std::string& decoder,
                                       bool masks, bool boxes) {
  const std::string out = absl::StrCat(file_list, ".", decoder, ".json");
  std::vector<std::string> command = {python,       options.peer_script,
                                      "--files",    file_list,
                                      "--pipeline", spec,
                                      "--seconds",  absl::StrCat(options.seconds),
                                      "--decoder",  decoder,
                                      "--core",     "0",
                                      "--out",      out};
  if (masks) {
    command.emplace_back("--masks");
  }
  if (boxes) {
    command.emplace_back("--boxes");
  }
  ASSIGN_OR_RETURN(ChildProcess peer, ChildProcess::Spawn(command));
  const int code = peer.Wait();
  if (code != 0) {
    return absl::UnavailableError(absl::StrCat("the torchvision peer (", python, " ",
                                               options.peer_script, " --decoder ", decoder,
                                               ") exited with ", code, " (its output is above)"));
  }
  ASSIGN_OR_RETURN(std::string json, ReadFileToString(out));
  std::filesystem::remove(out);
  v1::PeerResult result;
  if (!google::protobuf::util::JsonStringToMessage(json, &result).ok()) {
    return absl::DataLossError(absl::StrCat("unreadable peer result: ", json));
  }
  return result;
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
  const bool peers = report.torchvision_images_per_sec_per_core() > 0;
  const bool pil_simd = report.formats(0).pil_simd_images_per_sec() > 0;
  absl::StrAppendFormat(&text, "  %-17s %5s %9s", "images/s per core", "files", "heterodl");
  if (peers) {
    absl::StrAppendFormat(&text, " %8s %7s %8s %7s", "PIL", "ratio", "tensor", "ratio");
  }
  if (pil_simd) {
    absl::StrAppendFormat(&text, " %8s %7s", "PIL-SIMD", "ratio");
  }
  absl::StrAppend(&text, "  heterodl decodes with\n");
  for (const v1::FormatRow& row : report.formats()) {
    absl::StrAppendFormat(&text, "  %-17s %5d %9.0f", row.format(), row.files(),
                          row.heterodl_images_per_sec());
    std::vector<std::pair<double, double>> peer_columns;
    if (peers) {
      peer_columns = {{row.pil_images_per_sec(), row.ratio_vs_pil()},
                      {row.tensor_images_per_sec(), row.ratio_vs_tensor()}};
    }
    if (pil_simd) {
      peer_columns.emplace_back(row.pil_simd_images_per_sec(), row.ratio_vs_pil_simd());
    }
    for (const auto& [rate, ratio] : peer_columns) {
      // A peer that left this kind of file out has no figure for it.
      absl::StrAppend(&text, rate > 0 ? absl::StrFormat(" %8.0f %6.2fx", rate, ratio)
                                      : absl::StrFormat(" %8s %7s", "-", "-"));
    }
    absl::StrAppendFormat(&text, "  %s\n", row.decode_path());
  }
  if (peers && report.boxes()) {
    absl::StrAppend(&text,
                    "  images with their boxes, moved together; PIL: PIL.Image.open + "
                    "transforms.v2 with tv_tensors.BoundingBoxes, sanitized; tensor: "
                    "torchvision.io.decode_image + the same\n");
  } else if (peers && report.masks()) {
    absl::StrAppend(
        &text,
        "  image + mask pairs, decoded and moved together; PIL: PIL.Image.open of "
        "both + transforms.v2 with tv_tensors.Mask; tensor: torchvision.io.decode_image "
        "of both + the same\n");
  } else if (peers) {
    absl::StrAppend(&text,
                    "  PIL: torchvision.transforms over PIL.Image; tensor: "
                    "torchvision.io.decode_image + transforms.v2\n");
  }
  if (pil_simd) {
    absl::StrAppend(&text, "  PIL-SIMD: the PIL peer on Pillow-SIMD\n");
  }
  if (report.formats(0).pipeline_microseconds() > 0) {
    absl::StrAppendFormat(&text,
                          "\n  where the time goes, microseconds per image, one core:\n"
                          "  %-17s %9s %11s %9s %11s\n",
                          "", "pipeline", "decode+crop", "floor", "floor share");
    for (const v1::FormatRow& row : report.formats()) {
      absl::StrAppendFormat(&text, "  %-17s %9.0f %11.0f %9.0f %10.0f%%\n", row.format(),
                            row.pipeline_microseconds(), row.decoder_microseconds(),
                            row.entropy_floor_microseconds(),
                            100 * row.entropy_floor_microseconds() / row.pipeline_microseconds());
    }
    absl::StrAppend(&text,
                    "  decode+crop: the decoder and the crop's resize fused with it; floor: "
                    "JPEG's entropy-coded data down to the region's rows, decoded alone; PNG's "
                    "and WebP's decode+crop\n");
  }
  if (report.opencv_images_per_sec_per_core() > 0) {
    absl::StrAppendFormat(&text, "\n  %-34s %8.0f images/s per core   heterodl is %.2fx\n",
                          "OpenCV imdecode + same crop (all)",
                          report.opencv_images_per_sec_per_core(), report.ratio_vs_opencv());
  }
  if (report.separate_views_images_per_sec_per_core() > 0) {
    absl::StrAppendFormat(
        &text, "\n  %-34s %8.0f images/s per core   decoding once costs %.2fx per image\n",
        absl::StrCat("the ", report.views(), " views as separate pipelines"),
        report.separate_views_images_per_sec_per_core(), report.views_cost_vs_separate());
  }
  if (report.png_row_inflate_images_per_sec_per_core() > 0) {
    absl::StrAppendFormat(&text, "  %-34s %8.0f images/s per core   heterodl is %.2fx\n",
                          "PNG, libpng inflating (before)",
                          report.png_row_inflate_images_per_sec_per_core(),
                          report.png_ratio_vs_row_inflate());
  }
  for (const std::string& note : report.peer_notes()) {
    absl::StrAppend(&text, "  ", note, "\n");
  }
  absl::StrAppend(&text, "\n  versions:\n");
  for (const std::string& line : report.versions()) {
    absl::StrAppend(&text, "    ", line, "\n");
  }
  absl::StrAppend(&text, "\n  thread scaling (all files):\n");
  for (const v1::ThreadScaling& row : report.scaling()) {
    absl::StrAppendFormat(&text, "    %2d thread(s) %9.0f images/s   efficiency %.2f\n",
                          row.threads(), row.images_per_sec(), row.efficiency());
  }
  return text;
}

// One sample through `pipeline`, as a server's worker runs it: with a mask,
// the mask decoded and moved with its image.
Worker PipelineWorker(const Pipeline& pipeline) {
  return [&pipeline](const EncodedSample& sample, uint64_t index, uint8_t* out) {
    if (sample.detection) {
      SampleBoxes boxes{sample.boxes};
      return pipeline.Run(sample.image, {0, 0, index}, out, nullptr, nullptr, nullptr, &boxes).ok();
    }
    if (sample.mask.empty()) {
      return pipeline.Run(sample.image, {0, 0, index}, out).ok();
    }
    const absl::StatusOr<cv::Mat> ids = DecodePngMask(sample.mask, pipeline.options().max_pixels);
    if (!ids.ok()) {
      return false;
    }
    const SegmentationMask mask{ids->data,
                                ids->cols,
                                ids->rows,
                                static_cast<int>(ids->elemSize()),
                                pipeline.options().mask_ignore_index,
                                out + pipeline.output_bytes()};
    return pipeline.Run(sample.image, {0, 0, index}, out, nullptr, nullptr, &mask).ok();
  };
}

// What a worker writes per sample: the image, and a 16-bit mask at most.
size_t OutputBytes(const Pipeline& pipeline, bool masks) {
  return pipeline.output_bytes() +
         (masks ? size_t{2} * pipeline.output_height() * pipeline.output_width() : 0);
}

// Sample `index` of `dataset`, with its mask when it has masks.
absl::StatusOr<EncodedSample> ReadEncoded(const Dataset& dataset, size_t index) {
  EncodedSample sample;
  ASSIGN_OR_RETURN(sample.image, dataset.ReadSample(index));
  if (dataset.has_masks()) {
    ASSIGN_OR_RETURN(sample.mask, dataset.ReadMask(index));
  }
  sample.detection = dataset.sample(index).detection;
  sample.boxes = dataset.sample(index).boxes;
  return sample;
}

}  // namespace

absl::StatusOr<double> MeasureEngineRate(const std::string& dataset_path,
                                         const DatasetLimits& limits,
                                         const std::string& pipeline_spec, int threads,
                                         double seconds, int max_files) {
  RunPipelinesOnCallerThreadsOnly();
  ASSIGN_OR_RETURN(Dataset dataset, Dataset::Open(dataset_path, limits));
  ASSIGN_OR_RETURN(
      Pipeline pipeline,
      Pipeline::Parse(pipeline_spec.empty() ? std::string(kDefaultPipeline) : pipeline_spec));
  // Spread over the whole dataset: its first files may be one class's.
  std::vector<EncodedSample> files;
  const size_t count = std::min<size_t>(dataset.size(), static_cast<size_t>(max_files));
  for (size_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(EncodedSample sample, ReadEncoded(dataset, i * dataset.size() / count));
    files.push_back(std::move(sample));
  }
  return MeasureRate(files, PipelineWorker(pipeline), OutputBytes(pipeline, dataset.has_masks()),
                     threads, seconds);
}

namespace {

// Files of one kind, or all of them ("all").
struct FileGroup {
  std::string kind;
  std::vector<EncodedSample> bytes;
  double mean_width = 0;
  double mean_height = 0;

  void Add(EncodedSample encoded, cv::Size size) {
    const double n = static_cast<double>(bytes.size());
    mean_width = (mean_width * n + size.width) / (n + 1);
    mean_height = (mean_height * n + size.height) / (n + 1);
    bytes.push_back(std::move(encoded));
  }
};

constexpr char kAllFiles[] = "all";

// The benchmark's files: their bytes in memory (it times decoding, not the
// disk), all of them first, then by kind when there are several; their
// paths in a list for the peers, each line naming its kind then.
struct BenchFiles {
  std::vector<FileGroup> groups;
  bool masks = false;      // image + mask pairs, the peers' lines "IMAGE<TAB>MASK"
  bool boxes = false;      // images with boxes, the peers' lines "IMAGE<TAB>BOXES"
  uint64_t box_count = 0;  // of all files
  std::string list_path;
  // Files left out because heterodl's pipeline cannot decode them (the
  // peers are not given them either), and the first one's reason.
  uint32_t skipped = 0;
  std::string first_skipped;
  const FileGroup& all() const { return groups.front(); }
};

// From the header where a region decoder reads one (as the pipeline sees the
// image); files only OpenCV reads are decoded.
absl::StatusOr<cv::Size> ImageSize(const std::string& bytes) {
  ASSIGN_OR_RETURN(const std::optional<ImageHeader> header,
                   ReadImageHeader(bytes, int64_t{1} << 40));
  if (header) {
    return header->size;
  }
  ASSIGN_OR_RETURN(const cv::Mat image, DecodeImage(bytes));
  return image.size();
}

absl::StatusOr<BenchFiles> LoadFiles(const Dataset& dataset, const Pipeline& pipeline,
                                     const AugmentBenchOptions& options) {
  BenchFiles files;
  files.masks = dataset.has_masks();
  files.boxes = dataset.has_boxes();
  files.list_path =
      (std::filesystem::temp_directory_path() / absl::StrCat("heterodl-bench-", getpid(), ".txt"))
          .string();
  files.groups.push_back({kAllFiles});
  std::vector<std::pair<std::string, std::string>> kind_and_path;
  // Spread over the whole dataset: its first files may be one class's.
  const size_t count = std::min<size_t>(dataset.size(), static_cast<size_t>(options.max_files));
  // The decode check's output.
  std::vector<uint8_t> scratch(OutputBytes(pipeline, dataset.has_masks()));
  const Worker check = PipelineWorker(pipeline);
  for (size_t i = 0; i < count; ++i) {
    const size_t sample = i * dataset.size() / count;
    ASSIGN_OR_RETURN(EncodedSample bytes, ReadEncoded(dataset, sample));
    // A file the pipeline cannot decode is timed by nobody: every contender
    // measures the same files (a damaged one in a real collection is left
    // out and counted, not the end of the benchmark).
    absl::StatusOr<cv::Size> size = ImageSize(bytes.image);
    if (size.ok() && !check(bytes, sample, scratch.data())) {
      size = absl::InvalidArgumentError("the pipeline cannot decode it (or its mask)");
    }
    if (!size.ok()) {
      if (files.skipped++ == 0) {
        files.first_skipped =
            absl::StrCat("'", dataset.sample(sample).path, "': ", size.status().message());
      }
      continue;
    }
    const std::string kind = ImageKindName(bytes.image);
    auto group = std::find_if(files.groups.begin() + 1, files.groups.end(),
                              [&](const FileGroup& g) { return g.kind == kind; });
    if (group == files.groups.end()) {
      group = files.groups.insert(group, FileGroup{kind});
    }
    group->Add(bytes, *size);
    files.groups.front().Add(std::move(bytes), *size);
    // The peers' line: the image's path, then its mask's, or its boxes
    // ("x1 y1 x2 y2,...").
    std::string paths;
    for (const std::string& path :
         {dataset.sample(sample).path, dataset.sample(sample).mask_path}) {
      if (path.empty()) {
        continue;
      }
      absl::StrAppend(
          &paths, paths.empty() ? "" : "\t",
          path.front() == '/' ? path : (std::filesystem::path(dataset.root()) / path).string());
    }
    files.box_count += dataset.sample(sample).boxes.size();
    if (dataset.sample(sample).detection) {
      absl::StrAppend(
          &paths, "\t",
          absl::StrJoin(dataset.sample(sample).boxes, ",", [](std::string* out, const Box& box) {
            absl::StrAppend(out, box.x1, " ", box.y1, " ", box.x2, " ", box.y2);
          }));
    }
    kind_and_path.emplace_back(kind, paths);
  }
  // One kind: "all" is all there is to report.
  if (files.groups.size() == 2) {
    files.groups.pop_back();
  }
  // The most common kind first.
  std::stable_sort(
      files.groups.begin() + 1, files.groups.end(),
      [](const FileGroup& a, const FileGroup& b) { return a.bytes.size() > b.bytes.size(); });
  std::ofstream list(files.list_path);
  for (const auto& [kind, path] : kind_and_path) {
    if (files.groups.size() > 1) {
      list << kind << "\t";
    }
    list << path << "\n";
  }
  list.close();
  if (!list) {
    return absl::UnavailableError(absl::StrCat("cannot write ", files.list_path));
  }
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

// What a peer measured for `group` ("all": its total).
double PeerRate(const v1::PeerResult& result, const std::string& group) {
  if (group == kAllFiles) {
    return result.images_per_sec();
  }
  const auto found = result.groups().find(group);
  return found == result.groups().end() ? 0 : found->second.images_per_sec();
}

// Per group: heterodl's rate, and the peers' (empty without peers).
struct GroupRates {
  std::vector<double> ours, pil, tensor, pil_simd;
};

// One torchvision peer over the rounds: its rates' place in GroupRates, and
// why it stopped running when it failed.
struct PeerRun {
  const char* name;     // in notes: "PIL", "tensor", "Pillow-SIMD"
  const char* decoder;  // "pil" or "tensor"
  std::string python;
  std::vector<double> GroupRates::*column;
  std::string error;
  std::vector<double>& rates(GroupRates& group) const { return group.*column; }
};

// Microseconds per image on one core, over passes of `files` for about
// `seconds` (at least one pass), of `run` on each file and its index.
double MicrosecondsPerImage(const std::vector<EncodedSample>& files, double seconds,
                            const std::function<void(const EncodedSample&, uint64_t)>& run) {
  PinToCore(0);
  uint64_t images = 0;
  const absl::Time start = absl::Now();
  do {
    for (uint64_t i = 0; i < files.size(); ++i) {
      run(files[i], i);
    }
    images += files.size();
  } while (absl::Now() - start < absl::Seconds(seconds));
  return absl::ToDoubleSeconds(absl::Now() - start) * 1e6 / static_cast<double>(images);
}

// Where heterodl's time goes on `group`: Run()'s decode (with the first
// crop's resize fused into it), and the floor under it (the entropy-only
// decode where the format has one, that decode where not).
void ProfileGroup(const FileGroup& group, const Pipeline& pipeline, double seconds,
                  v1::FormatRow& row) {
  if (group.bytes.front().detection || !group.bytes.front().mask.empty() || pipeline.multi_view()) {
    return;  // images alone, one view: what the floor is defined for
  }
  std::vector<uint8_t> out(pipeline.output_bytes());
  std::vector<double> decoder(group.bytes.size());
  uint64_t passes = 0;
  // The pipeline's own time per image is the rate's (the rounds measured
  // it); these passes are for its decode's share.
  MicrosecondsPerImage(group.bytes, seconds, [&](const EncodedSample& sample, uint64_t i) {
    PipelineTimings timings;
    if (i == 0) {
      ++passes;
    }
    if (pipeline.Run(sample.image, {0, 0, i}, out.data(), &timings).ok()) {
      decoder[i] += timings.decode_seconds * 1e6;
    }
  });
  // Each file's floor: its entropy-only decode, else its decoder's part.
  std::vector<bool> has_floor(group.bytes.size());
  for (size_t i = 0; i < group.bytes.size(); ++i) {
    has_floor[i] = pipeline.DecodeEntropyOnly(group.bytes[i].image, {0, 0, i}).ok();
  }
  double decoder_total = 0;
  double floor_without_entropy = 0;
  for (size_t i = 0; i < group.bytes.size(); ++i) {
    decoder_total += decoder[i] / static_cast<double>(passes);
    floor_without_entropy += has_floor[i] ? 0 : decoder[i] / static_cast<double>(passes);
  }
  const double entropy_per_image =
      MicrosecondsPerImage(group.bytes, seconds, [&](const EncodedSample& sample, uint64_t i) {
        if (has_floor[i]) {
          (void)pipeline.DecodeEntropyOnly(sample.image, {0, 0, i});
        }
      });
  const double n = static_cast<double>(group.bytes.size());
  row.set_pipeline_microseconds(1e6 / row.heterodl_images_per_sec());
  row.set_decoder_microseconds(decoder_total / n);
  row.set_entropy_floor_microseconds(entropy_per_image + floor_without_entropy / n);
}

void AddFormatRow(const FileGroup& group, const GroupRates& rates, const Pipeline& pipeline,
                  v1::AugmentBenchReport& report) {
  v1::FormatRow* row = report.add_formats();
  row->set_format(group.kind);
  row->set_files(static_cast<uint32_t>(group.bytes.size()));
  row->set_mean_width(group.mean_width);
  row->set_mean_height(group.mean_height);
  row->set_heterodl_images_per_sec(Median(rates.ours));
  if (group.kind != kAllFiles) {
    row->set_decode_path(pipeline.DecodePath(group.bytes.front().image));
  }
  // Each peer's figures on their own: one may have left this kind out.
  if (Median(rates.pil) > 0) {
    row->set_pil_images_per_sec(Median(rates.pil));
    row->set_ratio_vs_pil(row->heterodl_images_per_sec() / row->pil_images_per_sec());
  }
  if (Median(rates.tensor) > 0) {
    row->set_tensor_images_per_sec(Median(rates.tensor));
    row->set_ratio_vs_tensor(row->heterodl_images_per_sec() / row->tensor_images_per_sec());
  }
  if (Median(rates.pil_simd) > 0) {
    row->set_pil_simd_images_per_sec(Median(rates.pil_simd));
    row->set_ratio_vs_pil_simd(row->heterodl_images_per_sec() / row->pil_simd_images_per_sec());
  }
}

// A multi-view pipeline's groups as single-view pipelines, with their view
// counts: what running every view on its own (decoding each time) takes.
absl::StatusOr<std::vector<std::pair<int, Pipeline>>> SeparateViewPipelines(
    const Pipeline& pipeline) {
  std::vector<std::pair<int, Pipeline>> separate;
  const std::vector<std::string> groups = absl::StrSplit(pipeline.CanonicalSpec(), ';');
  for (size_t g = 0; g < groups.size(); ++g) {
    const absl::string_view spec = groups[g];
    ASSIGN_OR_RETURN(Pipeline single, Pipeline::Parse(spec.substr(spec.find('*') + 1)));
    separate.emplace_back(pipeline.view_groups()[g].count, std::move(single));
  }
  return separate;
}

// Images per second when every view of an image runs as its own pipeline:
// one image costs the sum of its views' times.
double SeparateViewsRate(const std::vector<std::pair<int, Pipeline>>& separate,
                         const std::vector<EncodedSample>& files, double seconds) {
  double seconds_per_image = 0;
  for (const auto& [count, single] : separate) {
    const double rate =
        MeasureRate(files, PipelineWorker(single), single.output_bytes(), 1, seconds);
    seconds_per_image += count / rate;
  }
  return 1 / seconds_per_image;
}

// One core each, the contenders alternated over the rounds so that drifts
// in the machine's speed hit all alike; medians into the report.
absl::Status MeasureOneCore(const AugmentBenchOptions& options, const std::string& spec,
                            const Pipeline& pipeline, const BenchFiles& files,
                            v1::AugmentBenchReport& report) {
  const Worker ours = PipelineWorker(pipeline);
  const Worker baseline = OpenCvBaseline(pipeline.output_width());
  // The baseline crops images alone.
  const bool has_baseline = HasOpenCvBaseline(pipeline) && !files.masks && !files.boxes;
  const size_t out_bytes = OutputBytes(pipeline, files.masks);
  PipelineOptions row_inflate_options;
  row_inflate_options.png_inflate_whole = false;
  ASSIGN_OR_RETURN(const Pipeline row_inflate, Pipeline::Parse(spec, row_inflate_options));
  const auto png = std::find_if(files.groups.begin(), files.groups.end(),
                                [](const FileGroup& group) { return group.kind == "PNG"; });
  std::vector<GroupRates> rates(files.groups.size());
  std::vector<double> opencv, png_row_inflate, separate_views;
  std::vector<std::pair<int, Pipeline>> separate;
  if (pipeline.multi_view()) {
    ASSIGN_OR_RETURN(separate, SeparateViewPipelines(pipeline));
  }
  std::vector<PeerRun> peer_runs;
  if (options.peer) {
    peer_runs = {{"PIL", "pil", options.python, &GroupRates::pil},
                 {"tensor", "tensor", options.python, &GroupRates::tensor}};
    if (std::filesystem::exists(options.pillow_simd_python)) {
      peer_runs.push_back(
          {"Pillow-SIMD", "pil", options.pillow_simd_python, &GroupRates::pil_simd});
    } else if (!options.pillow_simd_python.empty()) {
      report.add_peer_notes(absl::StrCat("Pillow-SIMD peer not run: no ",
                                         options.pillow_simd_python,
                                         " (bench/peers/setup_pillow_simd.sh makes it)"));
    }
  }
  for (int round = 0; round < options.rounds; ++round) {
    for (size_t g = 0; g < files.groups.size(); ++g) {
      rates[g].ours.push_back(
          MeasureRate(files.groups[g].bytes, ours, out_bytes, 1, options.seconds));
    }
    for (PeerRun& peer : peer_runs) {
      if (!peer.error.empty()) {
        continue;
      }
      absl::StatusOr<v1::PeerResult> result = RunPeer(options, peer.python, files.list_path, spec,
                                                      peer.decoder, files.masks, files.boxes);
      if (!result.ok()) {
        // One peer that cannot run costs its columns, not the run.
        peer.error = std::string(result.status().message());
        report.add_peer_notes(absl::StrCat(peer.name, " peer failed: ", peer.error));
        continue;
      }
      if (round == 0) {
        report.add_versions(VersionLine(absl::StrCat(peer.name, " peer"), *result));
      }
      if (result->skipped_files() > 0 && round == 0) {
        report.add_peer_notes(absl::StrCat(peer.name, " peer left out ", result->skipped()));
      }
      if (files.boxes && result->boxes() != files.box_count && round == 0) {
        report.add_peer_notes(absl::StrCat(peer.name, " peer was given ", result->boxes(),
                                           " boxes of the ", files.box_count, " heterodl moves"));
      }
      for (size_t g = 0; g < files.groups.size(); ++g) {
        peer.rates(rates[g]).push_back(PeerRate(*result, files.groups[g].kind));
      }
    }
    if (has_baseline) {
      opencv.push_back(MeasureRate(files.all().bytes, baseline, out_bytes, 1, options.seconds));
    }
    if (png != files.groups.end()) {
      png_row_inflate.push_back(
          MeasureRate(png->bytes, PipelineWorker(row_inflate), out_bytes, 1, options.seconds));
    }
    if (!separate.empty()) {
      separate_views.push_back(SeparateViewsRate(separate, files.all().bytes, options.seconds));
    }
  }
  for (size_t g = 0; g < files.groups.size(); ++g) {
    AddFormatRow(files.groups[g], rates[g], pipeline, report);
    ProfileGroup(files.groups[g], pipeline, options.seconds / 2,
                 *report.mutable_formats(static_cast<int>(g)));
  }
  // All files together are the headline figures.
  const v1::FormatRow& all = report.formats(0);
  report.set_heterodl_images_per_sec_per_core(all.heterodl_images_per_sec());
  if (all.pil_images_per_sec() > 0) {
    report.set_torchvision_images_per_sec_per_core(all.pil_images_per_sec());
    report.set_ratio_vs_torchvision(all.ratio_vs_pil());
    report.set_tensor_images_per_sec_per_core(all.tensor_images_per_sec());
    report.set_ratio_vs_tensor(all.ratio_vs_tensor());
  }
  if (!opencv.empty()) {
    report.set_opencv_images_per_sec_per_core(Median(opencv));
    report.set_ratio_vs_opencv(all.heterodl_images_per_sec() / Median(opencv));
  }
  if (!separate_views.empty()) {
    report.set_separate_views_images_per_sec_per_core(Median(separate_views));
    report.set_views_cost_vs_separate(Median(separate_views) / all.heterodl_images_per_sec());
  }
  if (png != files.groups.end()) {
    report.set_png_row_inflate_images_per_sec_per_core(Median(png_row_inflate));
    report.set_png_ratio_vs_row_inflate(Median(rates[png - files.groups.begin()].ours) /
                                        Median(png_row_inflate));
  }
  return absl::OkStatus();
}

void MeasureScaling(const AugmentBenchOptions& options, const Pipeline& pipeline,
                    const BenchFiles& files, v1::AugmentBenchReport& report) {
  const double one_core = report.heterodl_images_per_sec_per_core();
  const int max_threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  for (int threads = 1; threads <= max_threads; ++threads) {
    const double rate =
        threads == 1 ? one_core
                     : MeasureRate(files.all().bytes, PipelineWorker(pipeline),
                                   OutputBytes(pipeline, files.masks), threads, options.seconds);
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
  ASSIGN_OR_RETURN(const BenchFiles files, LoadFiles(dataset, pipeline, options));
  if (files.all().bytes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("bench augment: no file of ", options.dataset,
                                                   " decodes (", files.first_skipped, ")"));
  }
  v1::AugmentBenchReport report;
  report.add_versions(absl::StrCat("heterodl: ", DecoderLibraryVersions()));
  if (files.skipped > 0) {
    report.add_peer_notes(
        absl::StrCat("heterodl and the peers left out ", files.skipped,
                     " files heterodl cannot decode (first: ", files.first_skipped, ")"));
  }
  report.set_dataset(options.dataset);
  report.set_masks(files.masks);
  report.set_boxes(files.boxes);
  report.set_files(static_cast<uint32_t>(files.all().bytes.size()));
  report.set_mean_width(files.all().mean_width);
  report.set_mean_height(files.all().mean_height);
  report.set_pipeline(pipeline.CanonicalSpec());
  int views = 0;
  for (const ViewGroupShape& group : pipeline.view_groups()) {
    views += group.count;
  }
  report.set_views(static_cast<uint32_t>(views));
  report.set_seconds_per_run(options.seconds);
  report.set_rounds(options.rounds);
  const absl::Status measured = MeasureOneCore(options, spec, pipeline, files, report);
  std::filesystem::remove(files.list_path);
  RETURN_IF_ERROR(measured);
  MeasureScaling(options, pipeline, files, report);
  if (!options.json) {
    return FormatTable(report);
  }
  return ToJson(report);
}

}  // namespace heterodl
