// ShardChunks: the chunks of shards in object storage held in memory, for a
// block-shuffled plan (src/plan/epoch_plan.h), under which the batches of a
// stretch of the epoch take their samples from a few shards. A shard is read
// in aligned chunks of chunk_bytes (one range GET each, instead of one per
// sample) and its samples are cut from memory until the chunk is let go,
// least recently used first, to stay within max_bytes.
//
//   auto chunks = std::make_shared<ShardChunks>(8 << 20, 1 << 30);
//   const uint64_t file = chunks->NewFile();
//   ASSIGN_OR_RETURN(auto chunk, chunks->Load(file, 3, [&] { return ReadRange(...); }));
//   std::shared_ptr<const std::string> held = chunks->Find(file, 3);  // null once let go
//
// Thread-safe. A chunk is read once however many threads ask for it at the
// same time (they wait for the one read).
#ifndef HETERODL_SRC_DATA_SHARD_CHUNKS_H_
#define HETERODL_SRC_DATA_SHARD_CHUNKS_H_

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/node_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace heterodl {

class ShardChunks {
 public:
  using Chunk = std::shared_ptr<const std::string>;
  using Read = std::function<absl::StatusOr<std::string>()>;

  // `chunk_bytes` is capped at a quarter of `max_bytes`, so that a window's
  // chunks are never all let go to make room for one.
  ShardChunks(uint64_t chunk_bytes, uint64_t max_bytes);
  ShardChunks(const ShardChunks&) = delete;
  ShardChunks& operator=(const ShardChunks&) = delete;

  uint64_t chunk_bytes() const { return chunk_bytes_; }
  // A number for a shard file, to name its chunks by.
  uint64_t NewFile() ABSL_LOCKS_EXCLUDED(mu_);

  // Chunk `chunk` of `file` if it is held (and now the most recently used),
  // else null. Never reads.
  Chunk Find(uint64_t file, uint64_t chunk) ABSL_LOCKS_EXCLUDED(mu_);
  // The chunk, read with `read` unless it is held or being read (then this
  // waits for that read, and fails with it). A failed read is not kept: a
  // later Load reads again.
  absl::StatusOr<Chunk> Load(uint64_t file, uint64_t chunk, const Read& read)
      ABSL_LOCKS_EXCLUDED(mu_);

  struct Counts {
    int64_t loaded = 0;  // chunks read
    uint64_t bytes_loaded = 0;
    int64_t hits = 0;         // Finds and Loads served from memory
    int64_t evicted = 0;      // let go to make room
    uint64_t held_bytes = 0;  // now
  };
  Counts counts() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Key = std::pair<uint64_t, uint64_t>;  // (file, chunk)
  struct Entry {
    bool loading = true;
    Chunk bytes;          // once loaded
    absl::Status failed;  // once its read failed, for the Loads waiting on it
    int waiters = 0;      // Loads waiting on its read
    // Its place in lru_ once loaded.
    std::list<Key>::iterator recent;
  };

  // Lets go of the least recently used loaded chunks until `bytes` more fit.
  void MakeRoom(uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Touch(Entry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t max_bytes_;
  const uint64_t chunk_bytes_;
  mutable absl::Mutex mu_;
  uint64_t next_file_ ABSL_GUARDED_BY(mu_) = 0;
  // Node-based: a Load waits on its entry's address.
  absl::node_hash_map<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
  // Loaded chunks, most recently used first.
  std::list<Key> lru_ ABSL_GUARDED_BY(mu_);
  Counts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace heterodl

#endif  // HETERODL_SRC_DATA_SHARD_CHUNKS_H_
