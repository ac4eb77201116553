#include "src/data/sample_fetcher.h"

#include <algorithm>
#include <utility>

namespace heterodl {

SampleFetcher::SampleFetcher(Read read, int threads, uint64_t max_bytes)
    : read_(std::move(read)), max_bytes_(max_bytes) {
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this] { Run(); });
  }
}

SampleFetcher::~SampleFetcher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) {
    thread.join();
  }
}

void SampleFetcher::Prefetch(absl::Span<const int64_t> indices, bool whole_chunks) {
  absl::MutexLock lock(&mu_);
  for (const int64_t index : indices) {
    if (index < 0) {
      continue;
    }
    if (const auto found = entries_.find(static_cast<size_t>(index)); found != entries_.end()) {
      // Asked for again (the next epoch's batch, a batch holding it twice)
      // before it was taken: read once, kept for each Take.
      ++found->second.wanted;
      continue;
    }
    if (entries_.size() >= kMaxEntries || held_bytes_ >= max_bytes_) {
      // A quarter of the room, from samples no batch took (abandoned).
      MakeRoom(max_bytes_ / 4);
      if (entries_.size() >= kMaxEntries || held_bytes_ >= max_bytes_) {
        return;  // full: the rest are read as they are taken
      }
    }
    Entry entry;
    entry.whole_chunks = whole_chunks;
    entries_.emplace(static_cast<size_t>(index), std::move(entry));
    queue_.push_back(static_cast<size_t>(index));
  }
}

absl::StatusOr<std::string> SampleFetcher::Take(size_t index) {
  {
    absl::MutexLock lock(&mu_);
    auto found = entries_.find(index);
    if (found != entries_.end() && found->second.state != State::kQueued) {
      Entry* entry = &found->second;  // a node: its address holds
      ++entry->waiters;
      mu_.Await(absl::Condition(
          +[](Entry* waited) { return waited->state == State::kDone; }, entry));
      --entry->waiters;
      entry->wanted = std::max(0, entry->wanted - 1);
      ++counts_.taken;
      if (entry->waiters > 0 || entry->wanted > 0) {
        // Another Take waits on it, or a later batch asked for it too:
        // each gets the bytes.
        return entry->bytes;
      }
      absl::StatusOr<std::string> bytes = std::move(entry->bytes);
      if (bytes.ok()) {
        held_bytes_ -= bytes->size();
      }
      entries_.erase(index);
      return bytes;
    }
    if (found != entries_.end()) {
      // Still queued: read here. The queue skips it, unless a later batch
      // asked for it too.
      found->second.wanted = std::max(0, found->second.wanted - 1);
      if (found->second.wanted == 0) {
        entries_.erase(found);
      }
    }
    ++counts_.direct;
  }
  return read_(index, false);
}

void SampleFetcher::Run() {
  while (true) {
    size_t index = 0;
    bool whole_chunks = false;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](SampleFetcher* self)
               ABSL_NO_THREAD_SAFETY_ANALYSIS { return self->stopping_ || !self->queue_.empty(); },
          this));
      if (stopping_) {
        return;
      }
      index = queue_.front();
      queue_.pop_front();
      auto found = entries_.find(index);
      if (found == entries_.end() || found->second.state != State::kQueued) {
        continue;  // taken (and read) by a decode thread meanwhile
      }
      found->second.state = State::kReading;
      whole_chunks = found->second.whole_chunks;
      ++counts_.prefetched;
    }
    absl::StatusOr<std::string> bytes = read_(index, whole_chunks);
    absl::MutexLock lock(&mu_);
    auto found = entries_.find(index);
    if (found == entries_.end()) {
      continue;
    }
    if (bytes.ok()) {
      held_bytes_ += bytes->size();
    }
    found->second.bytes = std::move(bytes);
    found->second.state = State::kDone;
    done_order_.push_back(index);
    if (done_order_.size() > 2 * kMaxEntries) {
      // Most are taken by now: keep those still waiting to be.
      std::deque<size_t> waiting;
      for (const size_t done : done_order_) {
        const auto entry = entries_.find(done);
        if (entry != entries_.end() && entry->second.state == State::kDone) {
          waiting.push_back(done);
        }
      }
      done_order_.swap(waiting);
    }
  }
}

void SampleFetcher::MakeRoom(uint64_t bytes) {
  while (!done_order_.empty() &&
         (held_bytes_ + bytes > max_bytes_ || entries_.size() >= kMaxEntries - kMaxEntries / 4)) {
    const size_t oldest = done_order_.front();
    done_order_.pop_front();
    auto found = entries_.find(oldest);
    if (found == entries_.end() || found->second.state != State::kDone ||
        found->second.waiters > 0) {
      continue;  // taken already (or asked for again since), or about to be
    }
    if (found->second.bytes.ok()) {
      held_bytes_ -= found->second.bytes->size();
    }
    entries_.erase(found);
    ++counts_.dropped;
  }
}

SampleFetcher::Counts SampleFetcher::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

}  // namespace heterodl
