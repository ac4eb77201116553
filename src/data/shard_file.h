// ShardFile: a file of a dataset's samples (a tar shard, a TFRecord file),
// read at offsets from any thread, on local disk or in object storage
// (internal to src/data).
//
//   ASSIGN_OR_RETURN(std::unique_ptr<ShardFile> file, OpenLocalShardFile(path, "tar shard"));
//   ASSIGN_OR_RETURN(std::string bytes, file->ReadAt(offset, size));
#ifndef HETERODL_SRC_DATA_SHARD_FILE_H_
#define HETERODL_SRC_DATA_SHARD_FILE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/data/shard_chunks.h"
#include "src/storage/object_url.h"
#include "src/storage/s3_client.h"

namespace heterodl {

// One shard's bytes, read at offsets from any thread.
class ShardFile {
 public:
  virtual ~ShardFile() = default;
  // Exactly `size` bytes from `offset`. UNAVAILABLE naming the shard when
  // they cannot be read (or the shard is shorter).
  virtual absl::StatusOr<std::string> ReadAt(uint64_t offset, uint64_t size) const = 0;
  virtual uint64_t size() const = 0;
  // Its path or URL, for messages.
  virtual const std::string& name() const = 0;
  // The last component of name(): what samples and indexes call it, the
  // same on disk and in a bucket.
  std::string base_name() const { return name().substr(name().rfind('/') + 1); }
  // Bytes read at once while the shard is indexed: a request's worth.
  virtual uint64_t index_chunk_bytes() const = 0;
  // Reads of [offset, offset + size) will follow: a file that reads in
  // chunks (ShardChunks) reads the chunks they lie in now, and later reads
  // of them come from memory while they are held. Nothing for others. An
  // error is the chunk read's; the reads that follow go to storage.
  virtual absl::Status Preload(uint64_t /*offset*/, uint64_t /*size*/) const {
    return absl::OkStatus();
  }
};

// Opens `path` for positioned reads. NOT_FOUND when it cannot be opened,
// FAILED_PRECONDITION when it is not a regular file (a FIFO named like a
// shard never blocks the server); `what` names the kind of file in errors.
absl::StatusOr<std::unique_ptr<ShardFile>> OpenLocalShardFile(std::string path,
                                                              absl::string_view what);

// The object `url` of `size` bytes (as listed), read with range GETs; with
// `chunks`, Preload reads whole chunks into it.
std::unique_ptr<ShardFile> OpenObjectShardFile(std::shared_ptr<S3Client> s3, ObjectUrl url,
                                               uint64_t size,
                                               std::shared_ptr<ShardChunks> chunks = nullptr);

}  // namespace heterodl

#endif  // HETERODL_SRC_DATA_SHARD_FILE_H_
