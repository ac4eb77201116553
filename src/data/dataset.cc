#include "src/data/dataset.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "augment/png_decoder.h"
#include "opencv2/core.hpp"
#include "src/common/fingerprint.h"
#include "src/common/log.h"
#include "src/common/status_macros.h"
#include "src/data/coco_instances.h"
#include "src/data/sample_cache.h"
#include "src/data/shard_index.h"
#include "src/data/tar_shards.h"
#include "src/data/tfrecord_files.h"

namespace heterodl {
namespace {

namespace fs = std::filesystem;

// A mask read for the dataset's classes larger than this is skipped.
constexpr int64_t kMaxMaskPixelsForClasses = 100'000'000;

bool HasImageExtension(const fs::path& path) {
  std::string extension = absl::AsciiStrToLower(path.extension().string());
  static constexpr absl::string_view kExtensions[] = {".jpg", ".jpeg", ".png", ".bmp", ".webp",
                                                      ".tif", ".tiff", ".ppm", ".pgm"};
  return std::find(std::begin(kExtensions), std::end(kExtensions), extension) !=
         std::end(kExtensions);
}

// A saved shard index at `path` (shard_index.h): nullopt when there is none
// or the limits say to index anyway.
absl::StatusOr<std::optional<std::string>> ReadSavedIndex(const std::string& path,
                                                          const DatasetLimits& limits) {
  std::error_code error;
  if (limits.ignore_saved_index || !fs::exists(path, error)) {
    return std::nullopt;
  }
  ASSIGN_OR_RETURN(std::string bytes, ReadRegularFile(path, kMaxListBytes));
  return bytes;
}

// The samples of shard files: from their saved `index` when it matches
// them, else by reading the files (`index_files`).
absl::StatusOr<std::vector<Sample>> SamplesOf(
    const std::string& path, const std::optional<std::string>& index,
    const std::function<absl::StatusOr<std::vector<Sample>>(absl::string_view)>& from_index,
    const std::function<absl::StatusOr<std::vector<Sample>>()>& index_files) {
  if (index) {
    absl::StatusOr<std::vector<Sample>> samples = from_index(*index);
    if (samples.ok()) {
      LogInfo("dataset %s: %d samples from its saved index", path, samples->size());
      return samples;
    }
    LogWarning(
        "dataset %s: its saved index is not used (%s); its files are indexed instead "
        "('heterodl dataset index %s' saves a new one)",
        path, samples.status().message(), path);
  }
  return index_files();
}

// The TFRecord files of folder `path`, sorted by name: none unless every
// regular file in it is one (hidden files and classes.txt aside).
absl::StatusOr<std::vector<std::string>> TfRecordFilesIn(const std::string& path) {
  std::vector<std::string> files;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(path, error)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name.front() == '.' || name == "classes.txt" ||
        IsShardIndexName(name)) {
      continue;
    }
    ASSIGN_OR_RETURN(const bool tfrecord, IsTfRecordFile(entry.path().string()));
    if (!tfrecord) {
      return std::vector<std::string>();
    }
    files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

Dataset::Dataset(std::string source, std::string root, std::vector<Sample> samples,
                 std::vector<std::string> class_names)
    : source_(std::move(source)),
      root_(std::move(root)),
      samples_(std::move(samples)),
      class_names_(std::move(class_names)) {
  bool shard_order = true;  // each sample in the shard of the last, or a later one
  for (const Sample& sample : samples_) {
    has_masks_ = has_masks_ || !sample.mask_path.empty();
    has_boxes_ = has_boxes_ || sample.detection;
    if (sample.shard < 0 || static_cast<size_t>(sample.shard) + 1 < shard_sizes_.size()) {
      shard_order = false;
    } else if (shard_order) {
      shard_sizes_.resize(static_cast<size_t>(sample.shard) + 1);
      ++shard_sizes_.back();
    }
  }
  if (!shard_order) {
    shard_sizes_.clear();
  }
  fingerprint_ = ComputeFingerprint();
}

uint64_t Dataset::ComputeFingerprint() const {
  Fingerprint fingerprint;
  fingerprint.Add(static_cast<uint64_t>(class_names_.size()));
  for (const std::string& name : class_names_) {
    fingerprint.Add(name);
  }
  fingerprint.Add(static_cast<uint64_t>(samples_.size()));
  for (const Sample& sample : samples_) {
    fingerprint.Add(sample.path).Add(static_cast<uint64_t>(sample.label));
    // Only when there is one: a classification dataset's fingerprint is
    // what it was before masks existed (checkpoints hold it).
    if (!sample.mask_path.empty()) {
      fingerprint.Add(sample.mask_path);
    }
    if (sample.detection) {
      fingerprint.Add(static_cast<uint64_t>(sample.boxes.size()));
      for (size_t i = 0; i < sample.boxes.size(); ++i) {
        const Box& box = sample.boxes[i];
        for (const float edge : {box.x1, box.y1, box.x2, box.y2}) {
          fingerprint.Add(static_cast<uint64_t>(std::lround(edge * 64)));
        }
        fingerprint.Add(static_cast<uint64_t>(sample.box_labels[i])).Add(sample.crowd[i]);
      }
    }
  }
  return fingerprint.value();
}

Dataset Dataset::Synthetic(size_t num_samples, int num_classes) {
  std::vector<Sample> samples;
  samples.reserve(num_samples);
  for (size_t i = 0; i < num_samples; ++i) {
    samples.push_back({absl::StrCat("synthetic/", i), static_cast<int64_t>(i % num_classes)});
  }
  std::vector<std::string> class_names;
  class_names.reserve(num_classes);
  for (int c = 0; c < num_classes; ++c) {
    class_names.push_back(absl::StrCat(c));
  }
  Dataset dataset(absl::StrCat("synthetic:", num_samples), "", std::move(samples),
                  std::move(class_names));
  dataset.synthetic_ = true;
  return dataset;
}

absl::StatusOr<Dataset> Dataset::Open(const std::string& path, const DatasetLimits& limits) {
  ASSIGN_OR_RETURN(Dataset dataset, OpenConfined(path, limits));
  if (dataset.has_masks_) {
    ASSIGN_OR_RETURN(dataset.class_names_, dataset.MaskClassNames(path));
    dataset.fingerprint_ = dataset.ComputeFingerprint();
  }
  if (dataset.s3_ != nullptr && !limits.cache_dir.empty()) {
    ASSIGN_OR_RETURN(dataset.cache_,
                     SampleCache::Open(limits.cache_dir, limits.cache_bytes, dataset.fingerprint_));
    LogInfo("samples read from %s are kept in %s, up to %d MiB (--cache-dir, --cache-mb)",
            dataset.source_, dataset.cache_->folder().string(), limits.cache_bytes >> 20);
  }
  return dataset;
}

absl::StatusOr<Dataset> Dataset::OpenConfined(const std::string& path,
                                              const DatasetLimits& limits) {
  if (IsObjectUrl(path)) {
    // Keys are names, not paths: nothing to confine (a file list's "../"
    // is refused as it is read).
    ASSIGN_OR_RETURN(Dataset dataset, OpenObjects(path, limits));
    dataset.limits_ = limits;
    return dataset;
  }
  ASSIGN_OR_RETURN(Dataset dataset, OpenAnyFormat(path, limits));
  dataset.limits_ = limits;
  if (limits.root.empty() || dataset.shards_ != nullptr || dataset.records_ != nullptr) {
    return dataset;  // shards are opened by the operator's own path
  }
  dataset.confined_to_ = fs::absolute(limits.root).lexically_normal();
  // Once, not per read: fs::absolute asks the kernel for the working folder.
  dataset.absolute_root_ = fs::absolute(dataset.root_);
  UniqueFd root_dir(::open(limits.root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root_dir.valid()) {
    return absl::NotFoundError(
        absl::StrCat("--dataset-root '", limits.root,
                     "': not a directory that can be opened: ", std::strerror(errno)));
  }
  dataset.root_dir_ = std::make_shared<const UniqueFd>(std::move(root_dir));
  for (size_t index = 0; index < dataset.size(); ++index) {
    const Sample& sample = dataset.sample(index);
    for (const std::string* file : {&sample.path, &sample.mask_path}) {
      if (file->empty()) {
        continue;
      }
      if (absl::Status beneath = dataset.PathBeneathRoot(*file).status(); !beneath.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("dataset '", path, "' sample ", index, ": ", beneath.message()));
      }
    }
  }
  return dataset;
}

absl::StatusOr<std::vector<std::string>> Dataset::MaskClassNames(const std::string& path) const {
  std::error_code error;
  std::string beside;
  std::optional<std::string> classes_text;
  if (s3_ != nullptr) {
    beside = absl::StrCat(root_, "classes.txt");
    absl::StatusOr<std::string> text = ReadFile("classes.txt");
    if (!absl::IsNotFound(text.status())) {
      RETURN_IF_ERROR(text.status());
      classes_text = *std::move(text);
    }
  } else {
    beside = ((fs::is_directory(path, error) ? fs::path(path) : fs::path(path).parent_path()) /
              "classes.txt")
                 .string();
    if (fs::exists(beside, error)) {
      ASSIGN_OR_RETURN(classes_text, ReadRegularFile(beside, kMaxListBytes));
    }
  }
  std::vector<std::string> names;
  if (classes_text) {
    const std::string& text = *classes_text;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      line = absl::StripAsciiWhitespace(line);
      if (!line.empty()) {
        names.emplace_back(line);
      }
    }
    if (names.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", beside, "' names no class (one name per line)"));
    }
    return names;
  }
  // A spread of masks, the same for every server: the largest id in them.
  int64_t largest = -1;
  const size_t step = std::max<size_t>(1, samples_.size() / kMasksForClasses);
  for (size_t index = 0; index < samples_.size(); index += step) {
    absl::StatusOr<std::string> bytes = ReadMask(index);
    absl::StatusOr<cv::Mat> ids =
        bytes.ok() ? DecodePngMask(*bytes, kMaxMaskPixelsForClasses) : bytes.status();
    if (!ids.ok()) {
      continue;  // a bad sample; the batches say so when it is built
    }
    for (int row = 0; row < ids->rows; ++row) {
      for (int col = 0; col < ids->cols; ++col) {
        const int id =
            ids->depth() == CV_16U ? ids->at<uint16_t>(row, col) : ids->at<uint8_t>(row, col);
        if (id != limits_.mask_ignore_index) {
          largest = std::max<int64_t>(largest, id);
        }
      }
    }
  }
  for (int64_t id = 0; id <= largest; ++id) {
    names.push_back(absl::StrCat(id));
  }
  return names;
}

absl::StatusOr<std::string> Dataset::PathBeneathRoot(const std::string& path) const {
  const fs::path full =
      (!path.empty() && path.front() == '/') ? fs::path(path) : absolute_root_ / path;
  const fs::path beneath = full.lexically_normal().lexically_relative(confined_to_);
  if (beneath.empty() || *beneath.begin() == "..") {
    return absl::PermissionDeniedError(
        absl::StrCat("'", path, "' lies outside --dataset-root '", limits_.root, "'"));
  }
  return beneath.string();
}

absl::StatusOr<Dataset> Dataset::OpenAnyFormat(const std::string& path,
                                               const DatasetLimits& limits) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (error || !fs::exists(status)) {
    return absl::NotFoundError(absl::StrCat("dataset '", path, "' does not exist"));
  }
  if (fs::is_directory(status)) {
    // A folder of .tar files (and no class folders) is a set of shards.
    std::vector<std::string> shards;
    bool has_folders = false;
    for (const fs::directory_entry& entry : fs::directory_iterator(path, error)) {
      if (entry.is_directory()) {
        has_folders = true;
      }
      if (entry.is_regular_file() && entry.path().extension() == ".tar") {
        shards.push_back(entry.path().string());
      }
    }
    if (!shards.empty() && !has_folders) {
      std::sort(shards.begin(), shards.end());
      return OpenTarShards(path, std::move(shards),
                           (fs::path(path) / std::string(kShardIndexName)).string(), limits);
    }
    if (!has_folders) {
      // A folder of TFRecord files (and of nothing else but hidden files
      // and classes.txt) is a TFRecord dataset.
      ASSIGN_OR_RETURN(std::vector<std::string> records, TfRecordFilesIn(path));
      if (!records.empty()) {
        return OpenTfRecords(path, std::move(records),
                             (fs::path(path) / std::string(kShardIndexName)).string(), limits);
      }
    }
    return OpenImageFolder(path);
  }
  if (fs::path(path).extension() == ".tar") {
    return OpenTarShards(path, {path}, absl::StrCat(path, kShardIndexSuffix), limits);
  }
  if (fs::path(path).extension() == ".json") {
    return OpenCoco(path, limits.image_root);
  }
  ASSIGN_OR_RETURN(const bool tfrecord, IsTfRecordFile(path));
  if (tfrecord) {
    return OpenTfRecords(path, {path}, absl::StrCat(path, kShardIndexSuffix), limits);
  }
  return OpenFileList(path);
}

absl::StatusOr<Dataset> Dataset::OpenCoco(const std::string& json_path,
                                          const std::string& image_root) {
  ASSIGN_OR_RETURN(CocoSamples coco, ReadCocoInstances(json_path));
  const std::string root =
      image_root.empty() ? fs::path(json_path).parent_path().string() : image_root;
  if (!fs::is_directory(root.empty() ? "." : root)) {
    return absl::NotFoundError(absl::StrCat("COCO images: '", root, "' is not a folder"));
  }
  return Dataset(json_path, root, std::move(coco.samples), std::move(coco.class_names));
}

absl::StatusOr<Dataset> Dataset::OpenImageFolder(const std::string& root) {
  std::vector<std::string> class_names;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, error)) {
    if (entry.is_directory()) {
      class_names.push_back(entry.path().filename().string());
    }
  }
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot list dataset folder '", root, "': ", error.message()));
  }
  std::sort(class_names.begin(), class_names.end());
  if (class_names == std::vector<std::string>{"images", "masks"}) {
    return OpenSegmentationFolder(root);
  }

  std::vector<Sample> samples;
  for (size_t label = 0; label < class_names.size(); ++label) {
    std::vector<std::string> files;
    const fs::path class_dir = fs::path(root) / class_names[label];
    for (const fs::directory_entry& entry : fs::recursive_directory_iterator(class_dir, error)) {
      if (entry.is_regular_file() && HasImageExtension(entry.path())) {
        files.push_back(fs::relative(entry.path(), root).string());
      }
    }
    if (error) {
      return absl::UnavailableError(
          absl::StrCat("cannot list class folder '", class_dir.string(), "': ", error.message()));
    }
    std::sort(files.begin(), files.end());
    for (std::string& file : files) {
      samples.push_back({std::move(file), static_cast<int64_t>(label)});
    }
  }
  if (samples.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("dataset folder '", root,
                     "' holds no images: expected ROOT/CLASS/IMAGE.jpg (ImageNet layout)"));
  }
  return Dataset(root, root, std::move(samples), std::move(class_names));
}

absl::StatusOr<Dataset> Dataset::OpenSegmentationFolder(const std::string& root) {
  // Masks by stem: NAME.png.
  std::map<std::string, std::string> masks;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(fs::path(root) / "masks", error)) {
    if (entry.is_regular_file() && entry.path().extension() == ".png") {
      masks[entry.path().stem().string()] = fs::relative(entry.path(), root).string();
    }
  }
  std::vector<Sample> samples;
  for (const fs::directory_entry& entry :
       fs::directory_iterator(fs::path(root) / "images", error)) {
    if (!entry.is_regular_file() || !HasImageExtension(entry.path())) {
      continue;
    }
    const auto mask = masks.find(entry.path().stem().string());
    if (mask == masks.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("segmentation folder '", root, "': '", entry.path().filename().string(),
                       "' has no mask (expected masks/", entry.path().stem().string(), ".png)"));
    }
    samples.push_back({fs::relative(entry.path(), root).string(), 0, mask->second});
  }
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot list segmentation folder '", root, "': ", error.message()));
  }
  if (samples.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "segmentation folder '", root, "' holds no images: expected ROOT/images/NAME.jpg"));
  }
  std::sort(samples.begin(), samples.end(),
            [](const Sample& a, const Sample& b) { return a.path < b.path; });
  return Dataset(root, root, std::move(samples), {});
}

absl::StatusOr<Dataset> Dataset::OpenFileList(const std::string& list_path) {
  // Bounded, and refused unless a regular file: a list is read at start.
  ASSIGN_OR_RETURN(const std::string contents, ReadRegularFile(list_path, kMaxListBytes));
  const std::string root = fs::path(list_path).parent_path().string();
  return FromFileList(list_path, root.empty() ? "." : root, contents);
}

absl::StatusOr<Dataset> Dataset::FromFileList(const std::string& list_path, std::string root,
                                              const std::string& contents) {
  std::vector<Sample> samples;
  int64_t max_label = -1;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    ++line_number;
    line = absl::StripTrailingAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') {
      continue;
    }
    std::vector<absl::string_view> fields = absl::StrSplit(line, '\t');
    int64_t label = -1;
    const bool labelled = fields.size() == 2 && absl::SimpleAtoi(fields[1], &label);
    if (fields.size() != 2 || fields[0].empty() || fields[1].empty() || (labelled && label < 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "file list '", list_path, "' line ", line_number,
          ": expected 'path<TAB>label' with a label >= 0 or 'image<TAB>mask', got '", line, "'"));
    }
    // A path where a label would be: a segmentation list, all of it. A
    // number too large for a label is an error, not a path.
    if (!labelled && fields[1].find_first_not_of("+-0123456789") == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("file list '", list_path, "' line ",
                                                     line_number, ": label ", fields[1],
                                                     " is over the largest label, ", kMaxLabel));
    }
    if (!labelled) {
      if (!samples.empty() && samples.front().mask_path.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("file list '", list_path, "' line ",
                                                       line_number, ": a mask path ('", fields[1],
                                                       "') in a list of labels"));
      }
      samples.push_back({std::string(fields[0]), 0, std::string(fields[1])});
      continue;
    }
    if (!samples.empty() && !samples.front().mask_path.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("file list '", list_path, "' line ",
                                                     line_number, ": a label (", label,
                                                     ") in a list of masks"));
    }
    if (label > kMaxLabel) {
      return absl::InvalidArgumentError(absl::StrCat("file list '", list_path, "' line ",
                                                     line_number, ": label ", label,
                                                     " is over the largest label, ", kMaxLabel));
    }
    max_label = std::max(max_label, label);
    samples.push_back({std::string(fields[0]), label});
  }
  if (samples.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("file list '", list_path, "' lists no samples"));
  }
  std::vector<std::string> class_names;  // none for masks
  for (int64_t label = 0; label <= max_label; ++label) {
    class_names.push_back(absl::StrCat(label));
  }
  return Dataset(list_path, std::move(root), std::move(samples), std::move(class_names));
}

absl::StatusOr<Dataset> Dataset::OpenTfRecords(const std::string& path,
                                               std::vector<std::string> file_paths,
                                               const std::string& index_path,
                                               const DatasetLimits& limits) {
  ASSIGN_OR_RETURN(std::shared_ptr<TfRecordFiles> records,
                   TfRecordFiles::Open(std::move(file_paths), limits.tfrecord));
  ASSIGN_OR_RETURN(const std::optional<std::string> index, ReadSavedIndex(index_path, limits));
  ASSIGN_OR_RETURN(Dataset dataset, FromTfRecords(path, path, std::move(records), index));
  dataset.index_location_ = index_path;
  return dataset;
}

absl::StatusOr<Dataset> Dataset::FromTfRecords(const std::string& path, std::string root,
                                               std::shared_ptr<const TfRecordFiles> records,
                                               const std::optional<std::string>& index) {
  ASSIGN_OR_RETURN(std::vector<Sample> samples, SamplesOf(
                                                    path, index,
                                                    [&](absl::string_view bytes) {
                                                      return SamplesFromShardIndex(
                                                          bytes, "tfrecord", &records->keys(),
                                                          records->files());
                                                    },
                                                    [&] { return records->Index(); }));
  std::vector<std::string> class_names;
  if (records->keys().mask.empty()) {
    int64_t max_label = 0;
    for (const Sample& sample : samples) {
      max_label = std::max(max_label, sample.label);
    }
    for (int64_t label = 0; label <= max_label; ++label) {
      class_names.push_back(absl::StrCat(label));
    }
  }
  Dataset dataset(path, std::move(root), std::move(samples), std::move(class_names));
  dataset.records_ = std::move(records);
  return dataset;
}

absl::StatusOr<Dataset> Dataset::OpenTarShards(const std::string& path,
                                               std::vector<std::string> shard_paths,
                                               const std::string& index_path,
                                               const DatasetLimits& limits) {
  ASSIGN_OR_RETURN(std::shared_ptr<TarShards> shards, TarShards::Open(std::move(shard_paths)));
  ASSIGN_OR_RETURN(const std::optional<std::string> index, ReadSavedIndex(index_path, limits));
  ASSIGN_OR_RETURN(Dataset dataset, FromTarShards(path, path, std::move(shards), index));
  dataset.index_location_ = index_path;
  return dataset;
}

absl::StatusOr<Dataset> Dataset::FromTarShards(const std::string& path, std::string root,
                                               std::shared_ptr<const TarShards> shards,
                                               const std::optional<std::string>& index) {
  ASSIGN_OR_RETURN(std::vector<Sample> samples, SamplesOf(
                                                    path, index,
                                                    [&](absl::string_view bytes) {
                                                      return SamplesFromShardIndex(
                                                          bytes, "tar", nullptr, shards->files());
                                                    },
                                                    [&] { return shards->Index(); }));
  if (samples.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("tar shards at '", path, "' hold no samples (KEY.jpg + KEY.cls members)"));
  }
  int64_t max_label = 0;
  for (const Sample& sample : samples) {
    max_label = std::max(max_label, sample.label);
  }
  std::vector<std::string> class_names;
  for (int64_t label = 0; label <= max_label; ++label) {
    class_names.push_back(absl::StrCat(label));
  }
  Dataset dataset(path, std::move(root), std::move(samples), std::move(class_names));
  dataset.shards_ = std::move(shards);
  return dataset;
}

Dataset::MissingFiles Dataset::FindMissingFiles(size_t keep) const {
  MissingFiles missing;
  if (synthetic_ || shards_ != nullptr || records_ != nullptr || s3_ != nullptr) {
    return missing;  // shards list what exists; objects are not asked one by one
  }
  for (const Sample& sample : samples_) {
    for (const std::string* file : {&sample.path, &sample.mask_path}) {
      if (file->empty()) {
        continue;  // no mask
      }
      const fs::path path =
          !file->empty() && file->front() == '/' ? fs::path(*file) : fs::path(root_) / *file;
      std::error_code error;
      if (fs::is_regular_file(path, error)) {
        continue;
      }
      ++missing.count;
      if (missing.first.size() < keep) {
        missing.first.push_back(*file);
      }
    }
  }
  return missing;
}

absl::StatusOr<std::string> Dataset::SerializeIndex() const {
  if (shards_ != nullptr) {
    return SerializeShardIndex("tar", nullptr, shards_->files(), samples_);
  }
  if (records_ != nullptr) {
    return SerializeShardIndex("tfrecord", &records_->keys(), records_->files(), samples_);
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "dataset '", source_, "' is no tar shards or TFRecord files: there is nothing to index"));
}

void Dataset::EnableReadAhead(int threads, uint64_t max_bytes) {
  read_ahead_owner_ = this;
  read_ahead_ = std::make_shared<SampleFetcher>(
      [this](size_t index, bool whole_chunks) { return ReadSampleNow(index, whole_chunks); },
      threads, max_bytes);
}

void Dataset::Prefetch(absl::Span<const int64_t> indices, bool whole_chunks) const {
  if (reads_ahead()) {
    read_ahead_->Prefetch(indices, whole_chunks && chunks_ != nullptr);
  }
}

SampleFetcher::Counts Dataset::read_ahead_counts() const {
  return read_ahead_ != nullptr ? read_ahead_->counts() : SampleFetcher::Counts();
}

absl::StatusOr<std::string> Dataset::ReadSample(size_t index) const {
  if (reads_ahead() && index < samples_.size()) {
    return read_ahead_->Take(index);
  }
  return ReadSampleNow(index);
}

absl::StatusOr<std::string> Dataset::ReadSampleNow(size_t index, bool whole_chunks) const {
  return Cached(absl::StrCat(index), [&] {
    if (whole_chunks && chunks_ != nullptr && index < samples_.size()) {
      // A chunk that cannot be read leaves the sample to its own read
      // below, with its retries, and its error if it fails too.
      const Sample& sample = samples_[index];
      (shards_ != nullptr ? shards_->Preload(sample) : records_->Preload(sample)).IgnoreError();
    }
    return ReadSampleFromStorage(index);
  });
}

absl::StatusOr<std::string> Dataset::Cached(
    const std::string& name, const std::function<absl::StatusOr<std::string>()>& read) const {
  if (cache_ == nullptr) {
    return read();
  }
  if (std::optional<std::string> hit = cache_->Get(name)) {
    return *std::move(hit);
  }
  ASSIGN_OR_RETURN(std::string bytes, read());
  cache_->Put(name, bytes);
  return bytes;
}

absl::StatusOr<std::string> Dataset::ReadSampleFromStorage(size_t index) const {
  if (synthetic_) {
    return absl::FailedPreconditionError("a synthetic dataset has no files to read");
  }
  if (index >= samples_.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("sample index ", index, " outside dataset of ", samples_.size()));
  }
  if (shards_ != nullptr) {
    const Sample& sample = samples_[index];
    RETURN_IF_ERROR(MemberWithinLimit(sample.path, sample.size));
    return shards_->Read(sample);
  }
  if (records_ != nullptr) {
    const Sample& sample = samples_[index];
    RETURN_IF_ERROR(MemberWithinLimit(sample.path, sample.size));
    return records_->Read(sample);
  }
  return ReadFile(samples_[index].path);
}

absl::StatusOr<std::string> Dataset::ReadMask(size_t index) const {
  if (index >= samples_.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("sample index ", index, " outside dataset of ", samples_.size()));
  }
  if (samples_[index].mask_path.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("dataset '", source_, "' has no mask for sample ", index));
  }
  return Cached(absl::StrCat(index, ".mask"), [&] { return ReadMaskFromStorage(index); });
}

absl::StatusOr<std::string> Dataset::ReadMaskFromStorage(size_t index) const {
  if (shards_ != nullptr) {
    const Sample& sample = samples_[index];
    RETURN_IF_ERROR(MemberWithinLimit(sample.mask_path, sample.mask_size));
    return shards_->ReadMask(sample);
  }
  if (records_ != nullptr) {
    const Sample& sample = samples_[index];
    RETURN_IF_ERROR(MemberWithinLimit(sample.mask_path, sample.mask_size));
    return records_->ReadMask(sample);
  }
  return ReadFile(samples_[index].mask_path);
}

absl::Status Dataset::MemberWithinLimit(const std::string& name, uint64_t size) const {
  if (size <= limits_.max_file_bytes) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat("'", name, "' holds ", size,
                                                    " bytes, more than the limit of ",
                                                    limits_.max_file_bytes, "; not read"));
}

absl::StatusOr<std::string> Dataset::ReadFile(const std::string& path) const {
  if (s3_ != nullptr) {
    return ReadObject(path);
  }
  if (root_dir_ != nullptr) {
    ASSIGN_OR_RETURN(const std::string beneath, PathBeneathRoot(path));
    return ReadRegularFileBeneath(root_dir_->get(), beneath, limits_.max_file_bytes);
  }
  if (!path.empty() && path.front() == '/') {
    return ReadRegularFile(path, limits_.max_file_bytes);
  }
  return ReadRegularFile((fs::path(root_) / path).string(), limits_.max_file_bytes);
}

}  // namespace heterodl
