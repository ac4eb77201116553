// SampleCache: a dataset's samples kept on local disk, bounded, so that a
// later epoch (or a batch rebuilt after a failover, or a server restarted on
// the same host) does not fetch them from object storage again.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<SampleCache> cache,
//                    SampleCache::Open("/mnt/nvme/heterodl-cache", 50ull << 30, fingerprint));
//   if (std::optional<std::string> bytes = cache->Get("17")) { ... }
//   cache->Put("17", bytes);
//
// Files live in DIR/heterodl-FINGERPRINT/, one per entry, written to a
// temporary name and renamed, so a server that dies leaves no torn entry;
// a server that opens the same folder later takes over what is there. The
// least recently used entries go when `max_bytes` would be passed. Entries
// are named by the dataset's fingerprint, which names its files: a bucket
// whose objects are overwritten in place needs a fresh folder. Thread-safe.
#ifndef HETERODL_SRC_DATA_SAMPLE_CACHE_H_
#define HETERODL_SRC_DATA_SAMPLE_CACHE_H_

#include <cstdint>
#include <filesystem>
#include <list>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace heterodl {

class SampleCache {
 public:
  // Makes (or reopens) the folder; UNAVAILABLE naming it when it cannot be
  // made or written.
  static absl::StatusOr<std::unique_ptr<SampleCache>> Open(const std::string& dir,
                                                           uint64_t max_bytes,
                                                           uint64_t fingerprint);

  // The entry's bytes, or nullopt (never cached, let go, or unreadable).
  std::optional<std::string> Get(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);
  // Keeps `bytes` as `name` (nothing when larger than the whole cache, or
  // when the disk refuses: the cache is an optimisation, never an error).
  void Put(const std::string& name, const std::string& bytes) ABSL_LOCKS_EXCLUDED(mu_);

  struct Counts {
    int64_t hits = 0;
    int64_t misses = 0;
    int64_t evicted = 0;
    uint64_t bytes = 0;  // held now
    int64_t entries = 0;
  };
  Counts counts() const ABSL_LOCKS_EXCLUDED(mu_);
  const std::filesystem::path& folder() const { return folder_; }

 private:
  SampleCache(std::filesystem::path folder, uint64_t max_bytes)
      : folder_(std::move(folder)), max_bytes_(max_bytes) {}

  struct Entry {
    uint64_t bytes = 0;
    std::list<std::string>::iterator recency;
  };
  // Forgets the least recently used entries until `bytes` more fit; their
  // files are removed.
  void MakeRoom(uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::filesystem::path folder_;
  const uint64_t max_bytes_;
  mutable absl::Mutex mu_;
  // Most recently used first.
  std::list<std::string> recency_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  Counts counts_ ABSL_GUARDED_BY(mu_);
  uint64_t temporaries_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_DATA_SAMPLE_CACHE_H_
