#include "src/data/tfrecord_files.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/common/log.h"
#include "src/common/status_macros.h"

namespace heterodl {
namespace {

// A file read front to back in chunks, holding the bytes from the oldest
// offset still wanted.
class SequentialReader {
 public:
  explicit SequentialReader(const ShardFile& file) : file_(file) {}

  // The bytes [offset, offset + size): the file's reads are in order, and
  // what lies before `offset` is let go.
  absl::StatusOr<absl::string_view> Bytes(uint64_t offset, uint64_t size) {
    if (offset > start_) {
      const uint64_t drop = std::min<uint64_t>(offset - start_, buffer_.size());
      buffer_.erase(0, drop);
      start_ += drop;
    }
    while (start_ + buffer_.size() < offset + size) {
      const uint64_t end = start_ + buffer_.size();
      const uint64_t want = std::max(file_.index_chunk_bytes(), offset + size - end);
      ASSIGN_OR_RETURN(const std::string chunk,
                       file_.ReadAt(end, std::min(want, file_.size() - end)));
      buffer_.append(chunk);
    }
    return absl::string_view(buffer_).substr(offset - start_, size);
  }

 private:
  const ShardFile& file_;
  uint64_t start_ = 0;
  std::string buffer_;
};

}  // namespace

absl::StatusOr<bool> IsTfRecordFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<ShardFile> file, OpenLocalShardFile(path, "file"));
  if (file->size() < kTfRecordHeaderBytes + kTfRecordFooterBytes) {
    return false;
  }
  ASSIGN_OR_RETURN(const std::string header, file->ReadAt(0, kTfRecordHeaderBytes));
  return TfRecordLength(header).has_value();
}

absl::StatusOr<std::shared_ptr<TfRecordFiles>> TfRecordFiles::Open(std::vector<std::string> paths,
                                                                   TfExampleKeys keys) {
  std::vector<std::unique_ptr<ShardFile>> files;
  for (std::string& path : paths) {
    ASSIGN_OR_RETURN(std::unique_ptr<ShardFile> file,
                     OpenLocalShardFile(std::move(path), "TFRecord file"));
    files.push_back(std::move(file));
  }
  return FromFiles(std::move(files), std::move(keys));
}

std::shared_ptr<TfRecordFiles> TfRecordFiles::FromFiles(
    std::vector<std::unique_ptr<ShardFile>> files, TfExampleKeys keys) {
  return std::shared_ptr<TfRecordFiles>(new TfRecordFiles(std::move(files), std::move(keys)));
}

absl::StatusOr<std::vector<Sample>> TfRecordFiles::Index() const {
  std::vector<Sample> samples;
  for (size_t file = 0; file < files_.size(); ++file) {
    RETURN_IF_ERROR(IndexFile(file, samples));
  }
  return samples;
}

absl::Status TfRecordFiles::IndexFile(size_t file, std::vector<Sample>& samples) const {
  const ShardFile& shard = *files_[file];
  const std::string name = shard.base_name();
  SequentialReader reader(shard);
  int64_t records = 0;
  int64_t unusable = 0;
  std::string first_problem;
  const auto note = [&](const std::string& problem) {
    if (unusable++ == 0) {
      first_problem = problem;
    }
  };
  uint64_t offset = 0;
  while (offset < shard.size()) {
    const std::string where = absl::StrCat(name, ":", records);
    if (shard.size() - offset < kTfRecordHeaderBytes) {
      note(absl::StrCat(where, ": ", shard.size() - offset,
                        " bytes at the end, less than a record header (a file cut short)"));
      break;
    }
    ASSIGN_OR_RETURN(const absl::string_view header, reader.Bytes(offset, kTfRecordHeaderBytes));
    const std::optional<uint64_t> length = TfRecordLength(header);
    if (!length) {
      note(absl::StrCat(where, ": a damaged record length at byte ", offset,
                        "; the rest of the file cannot be framed"));
      break;
    }
    Sample sample;
    sample.path = where;
    sample.shard = static_cast<int>(file);
    sample.offset = offset;
    sample.size = *length;
    if (!keys_.mask.empty()) {
      sample.mask_path = absl::StrCat(where, ":mask");
      sample.mask_offset = offset;
      sample.mask_size = *length;
    }
    const uint64_t record_bytes = kTfRecordHeaderBytes + *length + kTfRecordFooterBytes;
    if (*length > shard.size() || shard.size() - offset < record_bytes) {
      note(absl::StrCat(where, ": the record is cut short (a file cut short)"));
      samples.push_back(std::move(sample));
      ++records;
      break;
    }
    ASSIGN_OR_RETURN(const absl::string_view record, reader.Bytes(offset, record_bytes));
    const absl::string_view data = record.substr(kTfRecordHeaderBytes, *length);
    if (!TfRecordDataIntact(data, record.substr(kTfRecordHeaderBytes + *length))) {
      note(absl::StrCat(where, ": the record's checksum does not hold (damaged data)"));
    } else if (absl::StatusOr<ExampleParts> parts = ParseExample(data, keys_, where); !parts.ok()) {
      note(std::string(parts.status().message()));
    } else if (parts->label > kMaxLabel) {
      return absl::InvalidArgumentError(absl::StrCat("TFRecord ", where, ": label ", parts->label,
                                                     " is over the largest label, ", kMaxLabel));
    } else {
      sample.label = parts->label;
    }
    samples.push_back(std::move(sample));
    ++records;
    offset += record_bytes;
  }
  if (records == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("TFRecord file '", shard.name(), "' holds no record: ", first_problem));
  }
  if (unusable > 0) {
    LogWarning(
        "TFRecord file %s: %d of its %d records cannot be used (the first: %s); they are bad "
        "samples, replaced in every batch and counted",
        shard.name(), unusable, records, first_problem);
  }
  return absl::OkStatus();
}

absl::StatusOr<ExampleParts> TfRecordFiles::ReadRecord(const Sample& sample) const {
  if (sample.shard < 0 || static_cast<size_t>(sample.shard) >= files_.size()) {
    return absl::InternalError("sample of no TFRecord file");
  }
  const ShardFile& file = *files_[static_cast<size_t>(sample.shard)];
  const uint64_t record_bytes = kTfRecordHeaderBytes + sample.size + kTfRecordFooterBytes;
  if (sample.offset > file.size() || file.size() - sample.offset < record_bytes) {
    return absl::DataLossError(absl::StrCat("TFRecord ", sample.path, " (", file.name(),
                                            "): the record is cut short (a file cut short)"));
  }
  absl::StatusOr<std::string> record = file.ReadAt(sample.offset, record_bytes);
  if (!record.ok()) {
    return absl::Status(record.status().code(),
                        absl::StrCat("TFRecord ", sample.path, ": ", record.status().message()));
  }
  const absl::string_view view(*record);
  const absl::string_view data = view.substr(kTfRecordHeaderBytes, sample.size);
  if (TfRecordLength(view) != sample.size ||
      !TfRecordDataIntact(data, view.substr(kTfRecordHeaderBytes + sample.size))) {
    return absl::DataLossError(absl::StrCat("TFRecord ", sample.path, " (", file.name(),
                                            "): the record's checksum does not hold"));
  }
  return ParseExample(data, keys_, absl::StrCat("TFRecord ", sample.path));
}

absl::Status TfRecordFiles::Preload(const Sample& sample) const {
  if (sample.shard < 0 || static_cast<size_t>(sample.shard) >= files_.size()) {
    return absl::InternalError("sample of no TFRecord file");
  }
  return files_[static_cast<size_t>(sample.shard)]->Preload(
      sample.offset, kTfRecordHeaderBytes + sample.size + kTfRecordFooterBytes);
}

absl::StatusOr<std::string> TfRecordFiles::Read(const Sample& sample) const {
  ASSIGN_OR_RETURN(ExampleParts parts, ReadRecord(sample));
  return std::move(parts.image);
}

absl::StatusOr<std::string> TfRecordFiles::ReadMask(const Sample& sample) const {
  ASSIGN_OR_RETURN(ExampleParts parts, ReadRecord(sample));
  return std::move(parts.mask);
}

}  // namespace heterodl
