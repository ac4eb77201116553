// The TFRecord files of a dataset, indexed once and read a record at a time
// at its offset, on local disk or in object storage (internal to src/data).
//
//   ASSIGN_OR_RETURN(std::shared_ptr<TfRecordFiles> files, TfRecordFiles::Open(paths, keys));
//   ASSIGN_OR_RETURN(std::vector<Sample> samples, files->Index());  // one per record
//   ASSIGN_OR_RETURN(std::string jpeg, files->Read(samples[17]));
#ifndef HETERODL_SRC_DATA_TFRECORD_FILES_H_
#define HETERODL_SRC_DATA_TFRECORD_FILES_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/data/dataset.h"
#include "src/data/shard_file.h"
#include "src/data/tfrecord.h"

namespace heterodl {

// Whether the file `path` starts with a TFRecord record header (its
// length's checksum holds). Errors only when it cannot be read.
absl::StatusOr<bool> IsTfRecordFile(const std::string& path);

class TfRecordFiles {
 public:
  static absl::StatusOr<std::shared_ptr<TfRecordFiles>> Open(std::vector<std::string> paths,
                                                             TfExampleKeys keys);
  static std::shared_ptr<TfRecordFiles> FromFiles(std::vector<std::unique_ptr<ShardFile>> files,
                                                  TfExampleKeys keys);
  TfRecordFiles(const TfRecordFiles&) = delete;
  TfRecordFiles& operator=(const TfRecordFiles&) = delete;

  // One sample per record, in file order then record order; a sample's
  // path is "FILE:N" (record N of FILE, from 0), its label the record's.
  // Each record is read once: its checksum checked and its Example parsed.
  // A record that fails either (or lacks a key) is still a sample, with
  // label 0, that fails as it is read: a bad sample, replaced and counted;
  // so is a file's last record cut short. A damaged length ends its file's
  // index (nothing after it can be framed). Each file's unusable records
  // are logged once, with the first's number and why. Errors: a file that
  // cannot be read, or holds no record at all.
  absl::StatusOr<std::vector<Sample>> Index() const;

  // `sample`'s image bytes, or its mask's: its record read again, its
  // checksum checked. DATA_LOSS naming "FILE:N" for a damaged or cut
  // record, INVALID_ARGUMENT for a missing key.
  absl::StatusOr<std::string> Read(const Sample& sample) const;
  absl::StatusOr<std::string> ReadMask(const Sample& sample) const;
  // The record of `sample` will be read: its file's chunks are read now
  // (ShardFile::Preload).
  absl::Status Preload(const Sample& sample) const;

  const TfExampleKeys& keys() const { return keys_; }
  const std::vector<std::unique_ptr<ShardFile>>& files() const { return files_; }

 private:
  TfRecordFiles(std::vector<std::unique_ptr<ShardFile>> files, TfExampleKeys keys)
      : files_(std::move(files)), keys_(std::move(keys)) {}

  // The samples of file `file`, appended to `samples`.
  absl::Status IndexFile(size_t file, std::vector<Sample>& samples) const;
  // `sample`'s record, checked and parsed.
  absl::StatusOr<ExampleParts> ReadRecord(const Sample& sample) const;

  std::vector<std::unique_ptr<ShardFile>> files_;
  const TfExampleKeys keys_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_DATA_TFRECORD_FILES_H_
