// Indexing and reading WebDataset tar shards (internal to src/data).
#ifndef HETERODL_SRC_DATA_TAR_SHARDS_H_
#define HETERODL_SRC_DATA_TAR_SHARDS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/data/dataset.h"

namespace heterodl {

// The shard files of a dataset, open for positioned reads from any thread.
class TarShards {
 public:
  // Opens every shard; errors name the shard that cannot be opened.
  static absl::StatusOr<std::shared_ptr<TarShards>> Open(std::vector<std::string> paths);
  ~TarShards();
  TarShards(const TarShards&) = delete;
  TarShards& operator=(const TarShards&) = delete;

  const std::vector<std::string>& paths() const { return paths_; }

  // The samples of all shards, in shard order then member order: one per
  // key with an image member and a .cls member, or (segmentation) an image
  // and a .mask.png member. Errors name the shard and the member or key:
  // compressed or corrupt tar, a key without a label or mask or without an
  // image, an unreadable label, shards mixing labels and masks.
  absl::StatusOr<std::vector<Sample>> Index() const;

  // `sample`'s image bytes, or its mask's (pread at their offsets).
  absl::StatusOr<std::string> Read(const Sample& sample) const;
  absl::StatusOr<std::string> ReadMask(const Sample& sample) const;

 private:
  TarShards(std::vector<std::string> paths, std::vector<int> fds)
      : paths_(std::move(paths)), fds_(std::move(fds)) {}

  // `size` bytes at `offset` of shard `shard`, which hold `name`.
  absl::StatusOr<std::string> ReadRange(int shard, uint64_t offset, uint64_t size,
                                        const std::string& name) const;

  std::vector<std::string> paths_;
  std::vector<int> fds_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_DATA_TAR_SHARDS_H_
