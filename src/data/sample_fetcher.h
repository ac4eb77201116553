// SampleFetcher: a dataset's samples read ahead of decoding, many at once,
// for storage where every read waits a round trip (object storage: 10-50 ms
// a GET, whatever its size). A batch's samples are all asked for as the
// batch starts, on I/O threads of their own; the decode threads take them
// as they arrive instead of each waiting for its own GET in turn.
//
//   SampleFetcher fetcher([&](size_t i, bool whole_chunks) { return dataset.ReadSample(i); },
//                         64, 256 << 20);
//   fetcher.Prefetch(batch_indices);             // returns at once
//   ASSIGN_OR_RETURN(std::string bytes, fetcher.Take(batch_indices[0]));
//
// Bounded: at most `max_bytes` of fetched samples are held; past it, and
// past kMaxEntries samples asked for, a prefetch is not made and Take reads
// on the caller's thread. Samples fetched but never taken (a batch
// abandoned) are let go oldest first when room is needed. Thread-safe.
#ifndef HETERODL_SRC_DATA_SAMPLE_FETCHER_H_
#define HETERODL_SRC_DATA_SAMPLE_FETCHER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace heterodl {

class SampleFetcher {
 public:
  // `whole_chunks`: what Prefetch was told (false for a Take that reads
  // itself).
  using Read = std::function<absl::StatusOr<std::string>(size_t index, bool whole_chunks)>;
  // Samples asked for and not yet taken, at most.
  static constexpr size_t kMaxEntries = 8192;

  SampleFetcher(Read read, int threads, uint64_t max_bytes);
  // Stops the I/O threads after the reads they are in (pending ones are
  // dropped; a Take waiting on one reads it itself).
  ~SampleFetcher();
  SampleFetcher(const SampleFetcher&) = delete;
  SampleFetcher& operator=(const SampleFetcher&) = delete;

  // Asks for `indices`, in order. One asked for again before it was taken
  // (by the next epoch's batch, say) is read once and kept for both Takes.
  // `whole_chunks`: read them through whole chunks of their shards (a
  // block-shuffled plan's batches: Dataset::Prefetch).
  void Prefetch(absl::Span<const int64_t> indices, bool whole_chunks = false)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Sample `index`: its fetched bytes (waiting while its read runs), or,
  // never asked for or not yet started, read on this thread.
  absl::StatusOr<std::string> Take(size_t index) ABSL_LOCKS_EXCLUDED(mu_);

  struct Counts {
    int64_t prefetched = 0;  // reads made ahead
    int64_t taken = 0;       // Takes served by them
    int64_t direct = 0;      // Takes that read themselves
    int64_t dropped = 0;     // fetched, never taken, let go
  };
  Counts counts() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  enum class State { kQueued, kReading, kDone };
  struct Entry {
    State state = State::kQueued;
    bool whole_chunks = false;
    absl::StatusOr<std::string> bytes;
    // Takes waiting on it: never let go while one is.
    int waiters = 0;
    // Prefetches of it not yet taken: kept after a Take while another is.
    int wanted = 1;
  };

  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  // Lets go of fetched samples no one took, oldest first, until `bytes`
  // more fit and a quarter of kMaxEntries is free.
  void MakeRoom(uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Read read_;
  const uint64_t max_bytes_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<size_t> queue_ ABSL_GUARDED_BY(mu_);
  // Done samples in the order they finished, for MakeRoom (stale indices
  // are skipped there).
  std::deque<size_t> done_order_ ABSL_GUARDED_BY(mu_);
  // Node-based: a Take waits on its entry's address.
  absl::node_hash_map<size_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  Counts counts_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_DATA_SAMPLE_FETCHER_H_
