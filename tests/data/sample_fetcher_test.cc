#include "src/data/sample_fetcher.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_testing.h"

namespace heterodl {
namespace {

// A storage whose reads are counted, and held until released.
struct SlowStorage {
  std::atomic<int> reads{0};
  absl::Notification released;

  SampleFetcher::Read Reader() {
    return [this](size_t index, bool /*whole_chunks*/) -> absl::StatusOr<std::string> {
      released.WaitForNotification();
      ++reads;
      if (index == 13) {
        return absl::UnavailableError("sample 13 is gone");
      }
      return absl::StrCat("bytes of ", index);
    };
  }
};

TEST(SampleFetcherTest, PrefetchedSamplesAreReadOnceAndTaken) {
  SlowStorage storage;
  SampleFetcher fetcher(storage.Reader(), 4, 1 << 20);
  const std::vector<int64_t> batch = {5, 6, 7, 8, 13};
  fetcher.Prefetch(batch);
  fetcher.Prefetch(batch);  // asked twice: read once
  storage.released.Notify();
  // Every read started: a Take of one still queued reads it itself (and,
  // asked for twice, leaves it queued for the second ask).
  while (fetcher.counts().prefetched < 5) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  for (const int64_t index : batch) {
    const absl::StatusOr<std::string> bytes = fetcher.Take(static_cast<size_t>(index));
    if (index == 13) {
      EXPECT_TRUE(absl::IsUnavailable(bytes.status())) << bytes.status();
    } else {
      ASSERT_OK(bytes.status());
      EXPECT_EQ(*bytes, absl::StrCat("bytes of ", index));
    }
  }
  // A sample never asked for is read on the caller's thread.
  ASSERT_OK_AND_ASSIGN(const std::string direct, fetcher.Take(99));
  EXPECT_EQ(direct, "bytes of 99");
  const SampleFetcher::Counts counts = fetcher.counts();
  EXPECT_EQ(counts.direct + counts.taken, 6);
  EXPECT_EQ(storage.reads.load(), 6);  // each sample once
}

TEST(SampleFetcherTest, ASampleTwoBatchesAskForIsReadOnceForBoth) {
  // The next epoch's first batches are asked for before this epoch's last
  // are built: a sample in both is read once, and neither batch's Take
  // reads it again on a decode thread.
  SlowStorage storage;
  SampleFetcher fetcher(storage.Reader(), 4, 1 << 20);
  const std::vector<int64_t> this_epoch = {1, 2, 3};
  const std::vector<int64_t> next_epoch = {3, 4, 1};
  fetcher.Prefetch(this_epoch);
  fetcher.Prefetch(next_epoch);
  // Every read started (a Take of one still queued would read it itself).
  while (fetcher.counts().prefetched < 4) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  storage.released.Notify();
  for (const std::vector<int64_t>* batch : {&this_epoch, &next_epoch}) {
    for (const int64_t index : *batch) {
      ASSERT_OK_AND_ASSIGN(const std::string bytes, fetcher.Take(static_cast<size_t>(index)));
      EXPECT_EQ(bytes, absl::StrCat("bytes of ", index));
    }
  }
  EXPECT_EQ(storage.reads.load(), 4);
  EXPECT_EQ(fetcher.counts().direct, 0);
  EXPECT_EQ(fetcher.counts().taken, 6);
  // Taken by both: let go. A third Take reads for itself.
  ASSERT_OK(fetcher.Take(3).status());
  EXPECT_EQ(fetcher.counts().direct, 1);
}

TEST(SampleFetcherTest, TakesWaitForTheReadInFlightFromManyThreads) {
  SlowStorage storage;
  SampleFetcher fetcher(storage.Reader(), 8, 1 << 20);
  std::vector<int64_t> indices;
  for (int64_t i = 0; i < 200; ++i) {
    indices.push_back(i);
  }
  fetcher.Prefetch(indices);
  std::vector<std::thread> decoders;
  decoders.reserve(4);
  std::atomic<int> right{0};
  for (int t = 0; t < 4; ++t) {
    decoders.emplace_back([&, t] {
      for (size_t i = static_cast<size_t>(t); i < indices.size(); i += 4) {
        const absl::StatusOr<std::string> bytes = fetcher.Take(i);
        if (bytes.ok() && *bytes == absl::StrCat("bytes of ", i)) {
          ++right;
        }
      }
    });
  }
  storage.released.Notify();
  for (std::thread& decoder : decoders) {
    decoder.join();
  }
  EXPECT_EQ(right.load(), 199);  // 13 fails, as it should
  EXPECT_EQ(storage.reads.load(), 200);
}

TEST(SampleFetcherTest, WhatIsNeverTakenIsLetGoWithinItsBound) {
  SlowStorage storage;
  storage.released.Notify();
  // Room for about three samples of ~12 bytes.
  SampleFetcher fetcher(storage.Reader(), 2, 36);
  for (int64_t round = 0; round < 20; ++round) {
    const std::vector<int64_t> abandoned = {round * 10, round * 10 + 1, round * 10 + 2};
    fetcher.Prefetch(abandoned);  // never taken
    // Whatever was held, a later batch is still served.
    ASSERT_OK_AND_ASSIGN(const std::string bytes,
                         fetcher.Take(static_cast<size_t>(round * 10 + 2)));
    EXPECT_EQ(bytes, absl::StrCat("bytes of ", round * 10 + 2));
  }
  // Samples never taken are let go once their reads are done and room is
  // needed.
  for (int64_t next = 1000; fetcher.counts().dropped == 0 && next < 1'000'000; next += 3) {
    fetcher.Prefetch(std::vector<int64_t>{next, next + 1, next + 2});
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_GT(fetcher.counts().dropped, 0);
}

}  // namespace
}  // namespace heterodl
