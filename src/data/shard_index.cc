#include "src/data/shard_index.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "heterodl/shard_index.pb.h"

namespace heterodl {
bool IsShardIndexName(absl::string_view name) {
  return name == kShardIndexName || absl::EndsWith(name, kShardIndexSuffix);
}

std::string SerializeShardIndex(const std::string& kind, const TfExampleKeys* keys,
                                const std::vector<std::unique_ptr<ShardFile>>& files,
                                const std::vector<Sample>& samples) {
  v1::ShardIndex index;
  index.set_kind(kind);
  if (keys != nullptr) {
    index.set_image_key(keys->image);
    index.set_label_key(keys->label);
    index.set_label_offset(keys->label_offset);
    index.set_mask_key(keys->mask);
  }
  for (const std::unique_ptr<ShardFile>& file : files) {
    v1::IndexedFile* indexed = index.add_files();
    indexed->set_name(file->base_name());
    indexed->set_size(file->size());
  }
  for (const Sample& sample : samples) {
    v1::IndexedSample* indexed = index.add_samples();
    indexed->set_file(static_cast<uint32_t>(sample.shard));
    indexed->set_path(sample.path);
    indexed->set_label(sample.label);
    indexed->set_offset(sample.offset);
    indexed->set_size(sample.size);
    indexed->set_mask_path(sample.mask_path);
    indexed->set_mask_offset(sample.mask_offset);
    indexed->set_mask_size(sample.mask_size);
  }
  return index.SerializeAsString();
}

absl::StatusOr<std::vector<Sample>> SamplesFromShardIndex(
    absl::string_view bytes, const std::string& kind, const TfExampleKeys* keys,
    const std::vector<std::unique_ptr<ShardFile>>& files) {
  v1::ShardIndex index;
  if (!index.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::DataLossError("the index does not parse");
  }
  if (index.kind() != kind) {
    return absl::FailedPreconditionError(
        absl::StrCat("it indexes ", index.kind(), " files, these are ", kind));
  }
  if (keys != nullptr &&
      (index.image_key() != keys->image || index.label_key() != keys->label ||
       index.label_offset() != keys->label_offset || index.mask_key() != keys->mask)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "it was made with the keys image ", index.image_key(), ", label ", index.label_key(),
        " less ", index.label_offset(), ", mask '", index.mask_key(), "'"));
  }
  if (static_cast<size_t>(index.files_size()) != files.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("it indexes ", index.files_size(), " files, there are ", files.size()));
  }
  for (size_t i = 0; i < files.size(); ++i) {
    const v1::IndexedFile& indexed = index.files(static_cast<int>(i));
    if (indexed.name() != files[i]->base_name() || indexed.size() != files[i]->size()) {
      return absl::FailedPreconditionError(
          absl::StrCat("it indexes ", indexed.name(), " of ", indexed.size(), " bytes where ",
                       files[i]->name(), " has ", files[i]->size(), " (changed since?)"));
    }
  }
  std::vector<Sample> samples;
  samples.reserve(static_cast<size_t>(index.samples_size()));
  for (const v1::IndexedSample& indexed : index.samples()) {
    if (indexed.file() >= files.size() ||
        indexed.offset() + indexed.size() > files[indexed.file()]->size() ||
        indexed.mask_offset() + indexed.mask_size() > files[indexed.file()]->size() ||
        indexed.label() < 0 || indexed.label() > kMaxLabel) {
      return absl::DataLossError(
          absl::StrCat("its sample ", indexed.path(), " lies outside its file"));
    }
    Sample sample;
    sample.path = indexed.path();
    sample.label = indexed.label();
    sample.shard = static_cast<int>(indexed.file());
    sample.offset = indexed.offset();
    sample.size = indexed.size();
    sample.mask_path = indexed.mask_path();
    sample.mask_offset = indexed.mask_offset();
    sample.mask_size = indexed.mask_size();
    samples.push_back(std::move(sample));
  }
  return samples;
}

}  // namespace heterodl
