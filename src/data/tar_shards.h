// Indexing and reading WebDataset tar shards, on local disk or in object
// storage (internal to src/data).
#ifndef HETERODL_SRC_DATA_TAR_SHARDS_H_
#define HETERODL_SRC_DATA_TAR_SHARDS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/data/dataset.h"
#include "src/data/shard_file.h"
#include "src/storage/object_url.h"
#include "src/storage/s3_client.h"

namespace heterodl {

// The shard files of a dataset, open for positioned reads from any thread.
class TarShards {
 public:
  // Opens every shard; errors name the shard that cannot be opened.
  static absl::StatusOr<std::shared_ptr<TarShards>> Open(std::vector<std::string> paths);
  // Shards in object storage, `sizes[i]` bytes each (as listed), read in
  // `chunks` once preloaded (OpenObjectShardFile).
  static std::shared_ptr<TarShards> OpenObjects(const std::shared_ptr<S3Client>& s3,
                                                std::vector<ObjectUrl> urls,
                                                std::vector<uint64_t> sizes,
                                                const std::shared_ptr<ShardChunks>& chunks);
  // Shards already open.
  static std::shared_ptr<TarShards> FromFiles(std::vector<std::unique_ptr<ShardFile>> files);
  TarShards(const TarShards&) = delete;
  TarShards& operator=(const TarShards&) = delete;

  // The samples of all shards, in shard order then member order: one per
  // key with an image member and a .cls member, or (segmentation) an image
  // and a .mask.png member. Errors name the shard and the member or key:
  // compressed or corrupt tar, a key without a label or mask or without an
  // image, an unreadable label, shards mixing labels and masks.
  absl::StatusOr<std::vector<Sample>> Index() const;

  const std::vector<std::unique_ptr<ShardFile>>& files() const { return files_; }

  // `sample`'s image bytes, or its mask's (read at their offsets).
  absl::StatusOr<std::string> Read(const Sample& sample) const;
  absl::StatusOr<std::string> ReadMask(const Sample& sample) const;
  // `sample`'s members will be read: the chunks they lie in are read now
  // (ShardFile::Preload).
  absl::Status Preload(const Sample& sample) const;

 private:
  explicit TarShards(std::vector<std::unique_ptr<ShardFile>> files) : files_(std::move(files)) {}

  // The samples of shard `shard`, appended to `samples`.
  absl::Status IndexShard(size_t shard, std::vector<Sample>& samples) const;
  // `size` bytes at `offset` of shard `shard`, which hold `name`.
  absl::StatusOr<std::string> ReadRange(int shard, uint64_t offset, uint64_t size,
                                        const std::string& name) const;

  std::vector<std::unique_ptr<ShardFile>> files_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_DATA_TAR_SHARDS_H_
