#include "src/data/tar_shards.h"

#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "src/common/status_macros.h"

namespace heterodl {
namespace {

bool IsImageExtension(const std::string& extension) {
  static constexpr const char* kImages[] = {"jpg", "jpeg", "png", "webp", "bmp", "tif", "tiff"};
  for (const char* image : kImages) {
    if (extension == image) {
      return true;
    }
  }
  return false;
}

// WebDataset keys: the member path up to the first dot of its file name.
void SplitMember(const std::string& member, std::string* key, std::string* extension) {
  const size_t slash = member.rfind('/');
  const size_t dot = member.find('.', slash == std::string::npos ? 0 : slash + 1);
  *key = member.substr(0, dot);
  *extension = dot == std::string::npos ? "" : absl::AsciiStrToLower(member.substr(dot + 1));
}

using ArchivePtr = std::unique_ptr<archive, decltype(&archive_read_free)>;

// One sample's parts while a shard is indexed.
struct PendingSample {
  bool has_image = false;
  std::string image_member;
  uint64_t offset = 0;
  uint64_t size = 0;
  bool has_label = false;
  int64_t label = 0;
  bool has_mask = false;
  std::string mask_member;
  uint64_t mask_offset = 0;
  uint64_t mask_size = 0;
};

// libarchive's view of a shard: read in chunks from the start.
struct ArchiveInput {
  const ShardFile* file = nullptr;
  uint64_t position = 0;
  std::string chunk;
  absl::Status error;
};

la_ssize_t ReadArchiveChunk(archive* reader, void* user, const void** buffer) {
  auto* input = static_cast<ArchiveInput*>(user);
  const uint64_t left = input->file->size() - std::min(input->position, input->file->size());
  if (left == 0) {
    return 0;
  }
  absl::StatusOr<std::string> chunk =
      input->file->ReadAt(input->position, std::min(left, input->file->index_chunk_bytes()));
  if (!chunk.ok()) {
    input->error = chunk.status();
    archive_set_error(reader, EIO, "%s", std::string(chunk.status().message()).c_str());
    return -1;
  }
  input->chunk = *std::move(chunk);
  input->position += input->chunk.size();
  *buffer = input->chunk.data();
  return static_cast<la_ssize_t>(input->chunk.size());
}

}  // namespace

absl::StatusOr<std::shared_ptr<TarShards>> TarShards::Open(std::vector<std::string> paths) {
  std::vector<std::unique_ptr<ShardFile>> files;
  for (std::string& path : paths) {
    ASSIGN_OR_RETURN(std::unique_ptr<ShardFile> file,
                     OpenLocalShardFile(std::move(path), "tar shard"));
    files.push_back(std::move(file));
  }
  return FromFiles(std::move(files));
}

std::shared_ptr<TarShards> TarShards::OpenObjects(const std::shared_ptr<S3Client>& s3,
                                                  std::vector<ObjectUrl> urls,
                                                  std::vector<uint64_t> sizes,
                                                  const std::shared_ptr<ShardChunks>& chunks) {
  std::vector<std::unique_ptr<ShardFile>> files;
  for (size_t i = 0; i < urls.size(); ++i) {
    files.push_back(OpenObjectShardFile(s3, std::move(urls[i]), sizes[i], chunks));
  }
  return FromFiles(std::move(files));
}

std::shared_ptr<TarShards> TarShards::FromFiles(std::vector<std::unique_ptr<ShardFile>> files) {
  return std::shared_ptr<TarShards>(new TarShards(std::move(files)));
}

absl::StatusOr<std::vector<Sample>> TarShards::Index() const {
  std::vector<Sample> samples;
  for (size_t shard = 0; shard < files_.size(); ++shard) {
    RETURN_IF_ERROR(IndexShard(shard, samples));
  }
  return samples;
}

absl::Status TarShards::IndexShard(size_t shard, std::vector<Sample>& samples) const {
  const std::string& path = files_[shard]->name();
  ArchivePtr reader(archive_read_new(), archive_read_free);
  // Plain tar only: samples are read at their offsets in the file.
  archive_read_support_format_tar(reader.get());
  ArchiveInput input{files_[shard].get()};
  if (archive_read_open(reader.get(), &input, nullptr, ReadArchiveChunk, nullptr) != ARCHIVE_OK) {
    RETURN_IF_ERROR(input.error);
    return absl::InvalidArgumentError(
        absl::StrCat("tar shard '", path, "': ", archive_error_string(reader.get()),
                     " (shards must be uncompressed tar: samples are read at their offsets)"));
  }
  {
    // Keys in the order their first member appears.
    std::vector<std::string> keys;
    std::map<std::string, PendingSample> pending;
    archive_entry* entry = nullptr;
    while (true) {
      const int rc = archive_read_next_header(reader.get(), &entry);
      if (rc == ARCHIVE_EOF) {
        break;
      }
      // ARCHIVE_WARN: e.g. a name not convertible to the locale; still valid.
      if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN) {
        RETURN_IF_ERROR(input.error);
        return absl::InvalidArgumentError(absl::StrCat(
            "tar shard '", path, "' is corrupt: ", archive_error_string(reader.get())));
      }
      if (archive_entry_filetype(entry) != AE_IFREG) {
        continue;
      }
      const char* name = archive_entry_pathname(entry);
      const std::string member = name != nullptr ? name : "";
      std::string key, extension;
      SplitMember(member, &key, &extension);
      const bool image = IsImageExtension(extension);
      const bool mask = extension == "mask.png";
      if (!image && !mask && extension != "cls") {
        continue;  // other WebDataset fields
      }
      auto [it, is_new] = pending.try_emplace(key);
      if (is_new) {
        keys.push_back(key);
      }
      PendingSample& sample = it->second;
      if (mask) {
        sample.has_mask = true;
        sample.mask_member = member;
        sample.mask_offset = static_cast<uint64_t>(archive_filter_bytes(reader.get(), 0));
        sample.mask_size = static_cast<uint64_t>(archive_entry_size(entry));
      } else if (image) {
        // The data starts where the format reader stopped consuming: after
        // this member's header blocks (pax and GNU long-name ones included).
        sample.has_image = true;
        sample.image_member = member;
        sample.offset = static_cast<uint64_t>(archive_filter_bytes(reader.get(), 0));
        sample.size = static_cast<uint64_t>(archive_entry_size(entry));
      } else {
        char text[32] = {};
        const la_ssize_t n = archive_read_data(reader.get(), text, sizeof(text) - 1);
        if (n < 0 ||
            !absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(text, n)),
                              &sample.label) ||
            sample.label < 0) {
          return absl::InvalidArgumentError(absl::StrCat("tar shard '", path, "': member '", member,
                                                         "' is not a label (an integer >= 0)"));
        }
        if (sample.label > kMaxLabel) {
          return absl::InvalidArgumentError(absl::StrCat("tar shard '", path, "': member '", member,
                                                         "' holds label ", sample.label,
                                                         ", over the largest label, ", kMaxLabel));
        }
        sample.has_label = true;
      }
    }
    const std::string shard_name = files_[shard]->base_name();
    for (const std::string& key : keys) {
      const PendingSample& sample = pending[key];
      if (!sample.has_image || !(sample.has_label || sample.has_mask)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tar shard '", path, "': sample '", key, "' has ",
            sample.has_image ? "an image but no .cls label or .mask.png" : "no image"));
      }
      // Every sample of every shard, as the first: labelled or masked.
      const bool masked = samples.empty() ? sample.has_mask : !samples.front().mask_path.empty();
      if (sample.has_mask != masked) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tar shard '", path, "': sample '", key, "' has ",
            sample.has_mask ? "a mask where the first sample has none" : "no .mask.png",
            " (segmentation shards pair every image with its mask)"));
      }
      Sample indexed;
      indexed.path = absl::StrCat(shard_name, ":", sample.image_member);
      indexed.label = sample.label;
      indexed.shard = static_cast<int>(shard);
      indexed.offset = sample.offset;
      indexed.size = sample.size;
      if (sample.has_mask) {
        indexed.mask_path = absl::StrCat(shard_name, ":", sample.mask_member);
        indexed.mask_offset = sample.mask_offset;
        indexed.mask_size = sample.mask_size;
      }
      samples.push_back(std::move(indexed));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TarShards::Read(const Sample& sample) const {
  return ReadRange(sample.shard, sample.offset, sample.size, sample.path);
}

absl::StatusOr<std::string> TarShards::ReadMask(const Sample& sample) const {
  return ReadRange(sample.shard, sample.mask_offset, sample.mask_size, sample.mask_path);
}

absl::Status TarShards::Preload(const Sample& sample) const {
  if (sample.shard < 0 || static_cast<size_t>(sample.shard) >= files_.size()) {
    return absl::InternalError("sample of no shard");
  }
  const ShardFile& file = *files_[static_cast<size_t>(sample.shard)];
  RETURN_IF_ERROR(file.Preload(sample.offset, sample.size));
  return sample.mask_size > 0 ? file.Preload(sample.mask_offset, sample.mask_size)
                              : absl::OkStatus();
}

absl::StatusOr<std::string> TarShards::ReadRange(int shard, uint64_t offset, uint64_t size,
                                                 const std::string& name) const {
  if (shard < 0 || static_cast<size_t>(shard) >= files_.size()) {
    return absl::InternalError("sample of no shard");
  }
  absl::StatusOr<std::string> bytes = files_[static_cast<size_t>(shard)]->ReadAt(offset, size);
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code(),
                        absl::StrCat("'", name, "': ", bytes.status().message()));
  }
  return bytes;
}

}  // namespace heterodl
