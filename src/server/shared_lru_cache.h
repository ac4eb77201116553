// SharedLruCache: values built once per key and shared (a data server's
// compiled pipelines, by spec), kept while there is room, least recently
// used first out. An entry in use elsewhere (a shared_ptr held outside the
// cache) is never evicted, and no sequence of inserts fills the cache for
// good: entries nobody uses make room for new ones.
//
//   if (std::shared_ptr<const V> cached = cache.Get(key)) return cached;
//   auto built = std::make_shared<const V>(...);  // outside any lock
//   return cache.Put(key, std::move(built), bytes);
//
// Not thread-safe: its owner's lock guards it.
#ifndef HETERODL_SRC_SERVER_SHARED_LRU_CACHE_H_
#define HETERODL_SRC_SERVER_SHARED_LRU_CACHE_H_

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <utility>

namespace heterodl {

template <typename Value>
class SharedLruCache {
 public:
  SharedLruCache(size_t max_entries, uint64_t max_bytes)
      : max_entries_(max_entries), max_bytes_(max_bytes) {}

  // The value of `key`, now the most recently used; null when not cached.
  std::shared_ptr<const Value> Get(const std::string& key) {
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      return nullptr;
    }
    order_.splice(order_.begin(), order_, it->second.position);
    return it->second.value;
  }

  // Caches `value` as `key`'s (`bytes`: what it holds) after evicting the
  // least recently used entries nobody else holds, as many as it takes to
  // fit. When even then it does not fit (everything cached is in use), it
  // is returned uncached. A key cached meanwhile keeps its first value,
  // which is returned.
  std::shared_ptr<const Value> Put(const std::string& key, std::shared_ptr<const Value> value,
                                   uint64_t bytes) {
    if (std::shared_ptr<const Value> cached = Get(key)) {
      return cached;
    }
    auto victim = order_.end();
    while ((entries_.size() + 1 > max_entries_ || bytes_ + bytes > max_bytes_) &&
           victim != order_.begin()) {
      --victim;
      auto entry = entries_.find(*victim);
      if (entry->second.value.use_count() > 1) {
        continue;  // in use: kept
      }
      bytes_ -= entry->second.bytes;
      entries_.erase(entry);
      victim = order_.erase(victim);
    }
    if (entries_.size() + 1 > max_entries_ || bytes_ + bytes > max_bytes_) {
      return value;
    }
    order_.push_front(key);
    entries_.emplace(key, Entry{value, bytes, order_.begin()});
    bytes_ += bytes;
    return value;
  }

  size_t size() const { return entries_.size(); }
  uint64_t bytes() const { return bytes_; }

 private:
  struct Entry {
    std::shared_ptr<const Value> value;
    uint64_t bytes = 0;
    std::list<std::string>::iterator position;  // in order_
  };

  const size_t max_entries_;
  const uint64_t max_bytes_;
  std::map<std::string, Entry> entries_;
  std::list<std::string> order_;  // most recently used first
  uint64_t bytes_ = 0;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_SERVER_SHARED_LRU_CACHE_H_
