// Shard indexes: what indexing tar shards or TFRecord files found, saved so
// that a server starting on the same files reads one small object instead
// of every file (internal to src/data).
//
//   std::string bytes = SerializeShardIndex("tfrecord", &keys, files, samples);
//   ...
//   absl::StatusOr<std::vector<Sample>> samples = SamplesFromShardIndex(bytes, "tfrecord", &keys,
//   files);
//
// Where an index lives: `heterodl-index.pb` in a folder (or prefix) of
// files, FILE + `.heterodl-index.pb` beside a single one.
#ifndef HETERODL_SRC_DATA_SHARD_INDEX_H_
#define HETERODL_SRC_DATA_SHARD_INDEX_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/data/dataset.h"
#include "src/data/shard_file.h"
#include "src/data/tfrecord.h"

namespace heterodl {

// The index's name in a folder of files, and the suffix beside one file.
inline constexpr absl::string_view kShardIndexName = "heterodl-index.pb";
inline constexpr absl::string_view kShardIndexSuffix = ".heterodl-index.pb";

// Whether a file named `name` is an index (and so no shard).
bool IsShardIndexName(absl::string_view name);

// `samples` of `files` as an index. `kind`: "tar" or "tfrecord" (with the
// keys that gave its labels).
std::string SerializeShardIndex(const std::string& kind, const TfExampleKeys* keys,
                                const std::vector<std::unique_ptr<ShardFile>>& files,
                                const std::vector<Sample>& samples);

// The samples an index holds, when it was made of exactly `files` (names
// and sizes) with the same kind and keys; FAILED_PRECONDITION saying what
// differs otherwise, DATA_LOSS when it does not parse.
absl::StatusOr<std::vector<Sample>> SamplesFromShardIndex(
    absl::string_view bytes, const std::string& kind, const TfExampleKeys* keys,
    const std::vector<std::unique_ptr<ShardFile>>& files);

}  // namespace heterodl

#endif  // HETERODL_SRC_DATA_SHARD_INDEX_H_
