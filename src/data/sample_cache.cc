#include "src/data/sample_cache.h"

#include <fstream>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/common/fingerprint.h"
#include "src/common/log.h"
#include "src/common/read_file.h"

namespace heterodl {

namespace fs = std::filesystem;

absl::StatusOr<std::unique_ptr<SampleCache>> SampleCache::Open(const std::string& dir,
                                                               uint64_t max_bytes,
                                                               uint64_t fingerprint) {
  const fs::path folder = fs::path(dir) / absl::StrCat("heterodl-", FingerprintToHex(fingerprint));
  std::error_code error;
  fs::create_directories(folder, error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("--cache-dir: cannot make ", folder.string(), ": ", error.message()));
  }
  std::unique_ptr<SampleCache> cache(new SampleCache(folder, max_bytes));
  absl::MutexLock lock(&cache->mu_);
  // What an earlier server on this host left: kept, as if just used.
  for (const fs::directory_entry& entry : fs::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file(error)) {
      continue;
    }
    if (name.rfind(".tmp-", 0) == 0) {
      fs::remove(entry.path(), error);  // torn by a server that died
      continue;
    }
    const uint64_t bytes = entry.file_size(error);
    cache->recency_.push_front(name);
    cache->entries_[name] = Entry{bytes, cache->recency_.begin()};
    cache->held_bytes_ += bytes;
  }
  cache->MakeRoom(0);
  if (!cache->entries_.empty()) {
    LogInfo("sample cache %s: %d entries (%d MiB) from before", folder.string(),
            cache->entries_.size(), cache->held_bytes_ >> 20);
  }
  return cache;
}

std::optional<std::string> SampleCache::Get(const std::string& name) {
  {
    absl::MutexLock lock(&mu_);
    auto found = entries_.find(name);
    if (found == entries_.end()) {
      ++counts_.misses;
      return std::nullopt;
    }
    recency_.splice(recency_.begin(), recency_, found->second.recency);
  }
  absl::StatusOr<std::string> bytes = ReadFileToString((folder_ / name).string());
  absl::MutexLock lock(&mu_);
  if (!bytes.ok()) {
    // Let go by another thread meanwhile, or removed behind the server.
    auto found = entries_.find(name);
    if (found != entries_.end()) {
      held_bytes_ -= found->second.bytes;
      recency_.erase(found->second.recency);
      entries_.erase(found);
    }
    ++counts_.misses;
    return std::nullopt;
  }
  ++counts_.hits;
  return *std::move(bytes);
}

void SampleCache::Put(const std::string& name, const std::string& bytes) {
  fs::path temporary;
  {
    absl::MutexLock lock(&mu_);
    if (bytes.size() > max_bytes_ || entries_.contains(name)) {
      return;
    }
    MakeRoom(bytes.size());
    temporary = folder_ / absl::StrCat(".tmp-", temporaries_++);
  }
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out.good()) {
      std::error_code ignored;
      fs::remove(temporary, ignored);
      return;  // a full disk: served without the cache
    }
  }
  std::error_code error;
  fs::rename(temporary, folder_ / name, error);
  if (error) {
    fs::remove(temporary, error);
    return;
  }
  absl::MutexLock lock(&mu_);
  if (entries_.contains(name)) {
    return;  // another thread put it too (the same bytes)
  }
  MakeRoom(bytes.size());
  recency_.push_front(name);
  entries_[name] = Entry{bytes.size(), recency_.begin()};
  held_bytes_ += bytes.size();
}

void SampleCache::MakeRoom(uint64_t bytes) {
  while (!recency_.empty() && held_bytes_ + bytes > max_bytes_) {
    const std::string oldest = recency_.back();
    recency_.pop_back();
    auto found = entries_.find(oldest);
    held_bytes_ -= found->second.bytes;
    entries_.erase(found);
    ++counts_.evicted;
    std::error_code ignored;
    fs::remove(folder_ / oldest, ignored);
  }
}

SampleCache::Counts SampleCache::counts() const {
  absl::MutexLock lock(&mu_);
  Counts counts = counts_;
  counts.bytes = held_bytes_;
  counts.entries = static_cast<int64_t>(entries_.size());
  return counts;
}

}  // namespace heterodl
