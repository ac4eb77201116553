#include "src/data/shard_chunks.h"

#include <algorithm>
#include <iterator>

namespace heterodl {

ShardChunks::ShardChunks(uint64_t chunk_bytes, uint64_t max_bytes)
    : max_bytes_(max_bytes),
      chunk_bytes_(std::max<uint64_t>(1, std::min(chunk_bytes, max_bytes / 4))) {}

uint64_t ShardChunks::NewFile() {
  absl::MutexLock lock(&mu_);
  return next_file_++;
}

void ShardChunks::Touch(Entry& entry) { lru_.splice(lru_.begin(), lru_, entry.recent); }

ShardChunks::Chunk ShardChunks::Find(uint64_t file, uint64_t chunk) {
  absl::MutexLock lock(&mu_);
  const auto found = entries_.find(Key{file, chunk});
  if (found == entries_.end() || found->second.loading) {
    return nullptr;
  }
  Touch(found->second);
  ++counts_.hits;
  return found->second.bytes;
}

absl::StatusOr<ShardChunks::Chunk> ShardChunks::Load(uint64_t file, uint64_t chunk,
                                                     const Read& read) {
  const Key key{file, chunk};
  {
    absl::MutexLock lock(&mu_);
    auto [found, inserted] = entries_.try_emplace(key);
    Entry* entry = &found->second;  // a node: never erased while loading or waited on
    if (!inserted && entry->loading) {
      ++entry->waiters;
      mu_.Await(absl::Condition(
          +[](Entry* waited) { return !waited->loading; }, entry));
      --entry->waiters;
      if (entry->bytes != nullptr) {
        Touch(*entry);
        ++counts_.hits;
        return entry->bytes;
      }
      // The read this waited for failed: so does this Load, rather than
      // each waiter trying again in turn.
      absl::Status failed = entry->failed;
      if (entry->waiters == 0) {
        entries_.erase(key);
      }
      return failed;
    }
    if (!inserted && entry->bytes != nullptr) {
      Touch(*entry);
      ++counts_.hits;
      return entry->bytes;
    }
    if (!inserted) {
      // A failed read whose waiters are still waking: read it again, here.
      entry->loading = true;
      entry->failed = absl::OkStatus();
    }
  }
  absl::StatusOr<std::string> bytes = read();
  absl::MutexLock lock(&mu_);
  const auto found = entries_.find(key);
  Entry& entry = found->second;
  entry.loading = false;
  if (!bytes.ok()) {
    entry.failed = bytes.status();
    if (entry.waiters == 0) {
      entries_.erase(found);
    }
    return bytes.status();
  }
  MakeRoom(bytes->size());
  entry.bytes = std::make_shared<const std::string>(*std::move(bytes));
  lru_.push_front(key);
  entry.recent = lru_.begin();
  ++counts_.loaded;
  counts_.bytes_loaded += entry.bytes->size();
  counts_.held_bytes += entry.bytes->size();
  return entry.bytes;
}

void ShardChunks::MakeRoom(uint64_t bytes) {
  // Chunks whose Loads are still waking (waiters) are skipped: they hold
  // the entry's address.
  size_t skipped = 0;
  while (lru_.size() > skipped && counts_.held_bytes + bytes > max_bytes_) {
    const auto oldest = entries_.find(lru_.back());
    if (oldest->second.waiters > 0) {
      lru_.splice(lru_.begin(), lru_, std::prev(lru_.end()));
      ++skipped;
      continue;
    }
    lru_.pop_back();
    counts_.held_bytes -= oldest->second.bytes->size();
    // Readers hold their own reference to its bytes.
    entries_.erase(oldest);
    ++counts_.evicted;
  }
}

ShardChunks::Counts ShardChunks::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

}  // namespace heterodl
