// Dataset's forms in object storage (s3://BUCKET/KEY): found from one
// listing, read with GETs, each form's samples named as the same files on
// local disk name them.
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "src/common/status_macros.h"
#include "src/data/coco_instances.h"
#include "src/data/dataset.h"
#include "src/data/shard_index.h"
#include "src/data/tar_shards.h"
#include "src/data/tfrecord.h"
#include "src/data/tfrecord_files.h"
#include "src/storage/s3_client.h"

namespace heterodl {
namespace {

// A listing's objects below a folder: each key relative to it, and its size.
using Folder = std::map<std::string, uint64_t>;

std::string Extension(const std::string& key) {
  const size_t slash = key.rfind('/');
  const size_t dot = key.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) {
    return "";
  }
  return absl::AsciiStrToLower(key.substr(dot));
}

bool IsImageKey(const std::string& key) {
  static const std::set<std::string> kExtensions = {".jpg", ".jpeg", ".png", ".webp", ".bmp",
                                                    ".tif", ".tiff", ".ppm", ".pgm"};
  return kExtensions.count(Extension(key)) > 0;
}

// The first path component of a relative key, or "" for a key at the top.
std::string TopFolder(const std::string& relative) {
  const size_t slash = relative.find('/');
  return slash == std::string::npos ? "" : relative.substr(0, slash);
}

// Whether the object starts with a TFRecord record header (one small
// range read).
absl::StatusOr<bool> IsTfRecordObject(S3Client& s3, const ObjectUrl& url, uint64_t size) {
  if (size < kTfRecordHeaderBytes + kTfRecordFooterBytes) {
    return false;
  }
  ASSIGN_OR_RETURN(const std::string header, s3.Get(url, 0, kTfRecordHeaderBytes));
  return TfRecordLength(header).has_value();
}

// The saved index at `url` when the listing had it (one GET), unless the
// limits say to index anyway.
absl::StatusOr<std::optional<std::string>> ReadSavedIndex(S3Client& s3, const ObjectUrl& url,
                                                          bool listed,
                                                          const DatasetLimits& limits) {
  if (!listed || limits.ignore_saved_index) {
    return std::nullopt;
  }
  ASSIGN_OR_RETURN(std::string bytes, s3.GetAll(url, kMaxListBytes));
  return bytes;
}

}  // namespace

absl::StatusOr<Dataset> Dataset::OpenObjects(const std::string& url_text,
                                             const DatasetLimits& limits) {
  ASSIGN_OR_RETURN(const ObjectUrl url, ParseObjectUrl(url_text));
  ASSIGN_OR_RETURN(
      std::shared_ptr<S3Client> s3,
      S3Client::Create(limits.s3 ? *limits.s3 : S3OptionsFromEnvironment(ProcessEnvironment())));
  ASSIGN_OR_RETURN(const std::vector<ObjectInfo> listed, s3->List(url));
  // Shared by the shard files of tar shards and TFRecord files (one budget).
  auto chunks = std::make_shared<ShardChunks>(limits.read_chunk_bytes, limits.chunk_memory_bytes);
  // An object of exactly this key: one file. Otherwise the key is a folder.
  const auto exact = std::find_if(listed.begin(), listed.end(),
                                  [&](const ObjectInfo& object) { return object.key == url.key; });
  if (exact != listed.end() && !url.key.empty() && !absl::EndsWith(url.key, "/")) {
    const ObjectUrl folder = url.Folder();
    const std::string extension = Extension(url.key);
    Dataset dataset = Synthetic(0, 0);  // replaced below
    // What relative sample paths are below: the object's folder, or a COCO
    // file's image root.
    ObjectUrl below = folder;
    ASSIGN_OR_RETURN(const bool tfrecord, extension == ".tar" || extension == ".json"
                                              ? false
                                              : IsTfRecordObject(*s3, url, exact->size));
    // A saved index of one file is beside it, listed with it.
    const ObjectUrl index_url{url.bucket, absl::StrCat(url.key, kShardIndexSuffix)};
    const bool has_index = std::any_of(listed.begin(), listed.end(), [&](const ObjectInfo& object) {
      return object.key == index_url.key;
    });
    if (extension == ".tar") {
      std::shared_ptr<TarShards> shards = TarShards::OpenObjects(s3, {url}, {exact->size}, chunks);
      ASSIGN_OR_RETURN(const std::optional<std::string> index,
                       ReadSavedIndex(*s3, index_url, has_index, limits));
      ASSIGN_OR_RETURN(dataset,
                       FromTarShards(url_text, folder.ToString(), std::move(shards), index));
      dataset.index_location_ = index_url.ToString();
    } else if (tfrecord) {
      std::vector<std::unique_ptr<ShardFile>> files;
      files.push_back(OpenObjectShardFile(s3, url, exact->size, chunks));
      ASSIGN_OR_RETURN(const std::optional<std::string> index,
                       ReadSavedIndex(*s3, index_url, has_index, limits));
      ASSIGN_OR_RETURN(
          dataset,
          FromTfRecords(url_text, folder.ToString(),
                        TfRecordFiles::FromFiles(std::move(files), limits.tfrecord), index));
      dataset.index_location_ = index_url.ToString();
    } else {
      ASSIGN_OR_RETURN(const std::string text, s3->GetAll(url, kMaxListBytes));
      if (extension == ".json") {
        ASSIGN_OR_RETURN(CocoSamples coco, ParseCocoInstances(text, url_text));
        if (!limits.image_root.empty()) {
          if (!IsObjectUrl(limits.image_root)) {
            return absl::InvalidArgumentError(
                absl::StrCat("--image-root '", limits.image_root, "' for the COCO file ", url_text,
                             ": an s3:// URL (the annotations are in object storage)"));
          }
          ASSIGN_OR_RETURN(below, ParseObjectUrl(limits.image_root));
          below = below.Child("");
        }
        dataset = Dataset(url_text, below.ToString(), std::move(coco.samples),
                          std::move(coco.class_names));
      } else {
        ASSIGN_OR_RETURN(dataset, FromFileList(url_text, folder.ToString(), text));
        for (const Sample& sample : dataset.samples_) {
          for (const std::string* path : {&sample.path, &sample.mask_path}) {
            if (absl::StartsWith(*path, "/") || absl::StrContains(*path, "../") ||
                absl::StartsWith(*path, "s3://")) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "file list ", url_text, ": '", *path,
                  "' is not a key relative to the list's folder (lists in object storage name "
                  "keys below their own)"));
            }
          }
        }
      }
    }
    dataset.s3_ = std::move(s3);
    if (dataset.shards_ != nullptr || dataset.records_ != nullptr) {
      dataset.chunks_ = chunks;
    }
    dataset.object_root_ = below;
    return dataset;
  }

  const ObjectUrl root = url.Child("");
  Folder folder;
  for (const ObjectInfo& object : listed) {
    if (absl::StartsWith(object.key, root.key) && object.key.size() > root.key.size() &&
        !absl::EndsWith(object.key, "/")) {  // "folder" placeholder objects
      folder[object.key.substr(root.key.size())] = object.size;
    }
  }
  if (folder.empty()) {
    return absl::NotFoundError(
        absl::StrCat("dataset '", url_text, "' does not exist: no object has that key or prefix"));
  }
  std::set<std::string> top_folders;
  std::vector<std::string> top_shards;
  // Files at the top that may be TFRecord files (hidden ones and
  // classes.txt aside).
  std::vector<std::string> top_files;
  for (const auto& [relative, size] : folder) {
    const std::string top = TopFolder(relative);
    if (!top.empty()) {
      top_folders.insert(top);
    } else if (Extension(relative) == ".tar") {
      top_shards.push_back(relative);
    } else if (relative.front() != '.' && relative != "classes.txt" &&
               !IsShardIndexName(relative)) {
      top_files.push_back(relative);
    }
  }
  const ObjectUrl index_url = root.Child(std::string(kShardIndexName));
  const bool has_index = folder.count(std::string(kShardIndexName)) > 0;
  bool tfrecords = false;
  if (top_folders.empty() && top_shards.empty() && !top_files.empty()) {
    ASSIGN_OR_RETURN(
        tfrecords, IsTfRecordObject(*s3, root.Child(top_files.front()), folder[top_files.front()]));
  }
  Dataset dataset = Synthetic(0, 0);  // replaced below
  if (tfrecords) {
    // Every file at the top, sorted by name (std::map's order), as on disk.
    std::vector<std::unique_ptr<ShardFile>> files;
    files.reserve(top_files.size());
    for (const std::string& file : top_files) {
      files.push_back(OpenObjectShardFile(s3, root.Child(file), folder[file], chunks));
    }
    ASSIGN_OR_RETURN(const std::optional<std::string> index,
                     ReadSavedIndex(*s3, index_url, has_index, limits));
    ASSIGN_OR_RETURN(
        dataset, FromTfRecords(url_text, root.ToString(),
                               TfRecordFiles::FromFiles(std::move(files), limits.tfrecord), index));
    dataset.index_location_ = index_url.ToString();
  } else if (!top_shards.empty() && top_folders.empty()) {
    // std::map's order: the shards sorted by name, as on disk.
    std::vector<ObjectUrl> urls;
    std::vector<uint64_t> sizes;
    for (const std::string& shard : top_shards) {
      urls.push_back(root.Child(shard));
      sizes.push_back(folder[shard]);
    }
    std::shared_ptr<TarShards> shards =
        TarShards::OpenObjects(s3, std::move(urls), std::move(sizes), chunks);
    ASSIGN_OR_RETURN(const std::optional<std::string> index,
                     ReadSavedIndex(*s3, index_url, has_index, limits));
    ASSIGN_OR_RETURN(dataset, FromTarShards(url_text, root.ToString(), std::move(shards), index));
    dataset.index_location_ = index_url.ToString();
  } else if (top_folders == std::set<std::string>{"images", "masks"}) {
    std::map<std::string, std::string> masks;  // by stem
    for (const auto& [relative, size] : folder) {
      if (absl::StartsWith(relative, "masks/") && Extension(relative) == ".png" &&
          TopFolder(relative.substr(6)).empty()) {
        masks[relative.substr(6, relative.size() - 6 - 4)] = relative;
      }
    }
    std::vector<Sample> samples;
    for (const auto& [relative, size] : folder) {
      if (!absl::StartsWith(relative, "images/") || !IsImageKey(relative) ||
          !TopFolder(relative.substr(7)).empty()) {
        continue;
      }
      const std::string name = relative.substr(7);
      const std::string stem = name.substr(0, name.rfind('.'));
      const auto mask = masks.find(stem);
      if (mask == masks.end()) {
        return absl::FailedPreconditionError(absl::StrCat("segmentation folder '", url_text, "': '",
                                                          name, "' has no mask (expected masks/",
                                                          stem, ".png)"));
      }
      samples.push_back({relative, 0, mask->second});
    }
    if (samples.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "segmentation folder '", url_text, "' holds no images: expected ROOT/images/NAME.jpg"));
    }
    dataset = Dataset(url_text, root.ToString(), std::move(samples), {});
  } else {
    // An image folder: CLASS/.../IMAGE, classes and files sorted by name
    // (std::map's order is std::sort's).
    std::vector<std::string> class_names(top_folders.begin(), top_folders.end());
    std::vector<Sample> samples;
    for (size_t label = 0; label < class_names.size(); ++label) {
      const std::string prefix = class_names[label] + "/";
      for (auto it = folder.lower_bound(prefix);
           it != folder.end() && absl::StartsWith(it->first, prefix); ++it) {
        if (IsImageKey(it->first)) {
          samples.push_back({it->first, static_cast<int64_t>(label)});
        }
      }
    }
    if (samples.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("dataset '", url_text,
                       "' holds no images: expected PREFIX/CLASS/IMAGE.jpg (ImageNet layout)"));
    }
    dataset = Dataset(url_text, root.ToString(), std::move(samples), std::move(class_names));
  }
  dataset.s3_ = std::move(s3);
  if (dataset.shards_ != nullptr || dataset.records_ != nullptr) {
    dataset.chunks_ = chunks;
  }
  dataset.object_root_ = root;
  return dataset;
}

absl::StatusOr<std::string> Dataset::ReadObject(const std::string& path) const {
  const ObjectUrl object = object_root_.Child(path);
  return s3_->GetAll(object, limits_.max_file_bytes);
}

}  // namespace heterodl
