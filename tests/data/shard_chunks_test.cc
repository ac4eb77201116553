#include "src/data/shard_chunks.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace heterodl {
namespace {

TEST(ShardChunksTest, ReadsAChunkOnceForEveryoneAskingAtOnce) {
  ShardChunks chunks(1 << 10, 1 << 20);
  const uint64_t file = chunks.NewFile();
  std::atomic<int> reads{0};
  absl::Notification release;
  std::vector<std::thread> threads;
  std::atomic<int> same{0};
  threads.reserve(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      absl::StatusOr<ShardChunks::Chunk> chunk = chunks.Load(file, 3, [&] {
        ++reads;
        release.WaitForNotification();
        return absl::StatusOr<std::string>(std::string(1 << 10, 'c'));
      });
      if (chunk.ok() && **chunk == std::string(1 << 10, 'c')) {
        ++same;
      }
    });
  }
  absl::SleepFor(absl::Milliseconds(50));
  release.Notify();
  for (std::thread& thread : threads) {
    thread.join();
  }
  EXPECT_EQ(reads.load(), 1);
  EXPECT_EQ(same.load(), 8);
  EXPECT_EQ(chunks.counts().loaded, 1);
  EXPECT_EQ(chunks.counts().hits, 7);
  ASSERT_NE(chunks.Find(file, 3), nullptr);
  EXPECT_EQ(chunks.Find(file, 4), nullptr);
  EXPECT_EQ(chunks.Find(chunks.NewFile(), 3), nullptr);  // another file's chunk 3
}

TEST(ShardChunksTest, AFailedReadFailsItsWaitersAndIsReadAgainLater) {
  ShardChunks chunks(16, 1 << 10);
  const uint64_t file = chunks.NewFile();
  absl::Notification reading, release;
  std::thread first([&] {
    absl::StatusOr<ShardChunks::Chunk> chunk = chunks.Load(file, 0, [&] {
      reading.Notify();
      release.WaitForNotification();
      return absl::StatusOr<std::string>(absl::UnavailableError("503 SlowDown"));
    });
    EXPECT_EQ(chunk.status().code(), absl::StatusCode::kUnavailable);
  });
  reading.WaitForNotification();
  int waiter_reads = 0;
  std::thread waiter([&] {
    absl::StatusOr<ShardChunks::Chunk> chunk = chunks.Load(file, 0, [&] {
      ++waiter_reads;
      return absl::StatusOr<std::string>("read by the waiter");
    });
    // It waited for the first read (or, scheduled late, read for itself).
    EXPECT_TRUE(!chunk.ok() || waiter_reads == 1);
  });
  absl::SleepFor(absl::Milliseconds(50));
  release.Notify();
  first.join();
  waiter.join();
  // Not kept: the next Load reads.
  absl::StatusOr<ShardChunks::Chunk> again =
      chunks.Load(file, 0, [] { return absl::StatusOr<std::string>("second try"); });
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(**again == "second try" || **again == "read by the waiter");
}

TEST(ShardChunksTest, LetsTheLeastRecentlyUsedGoToStayWithinItsMemory) {
  ShardChunks chunks(100, 400);  // four chunks
  const uint64_t file = chunks.NewFile();
  const auto read = [] { return absl::StatusOr<std::string>(std::string(100, 'x')); };
  for (uint64_t chunk = 0; chunk < 4; ++chunk) {
    ASSERT_TRUE(chunks.Load(file, chunk, read).ok());
  }
  ASSERT_NE(chunks.Find(file, 0), nullptr);  // now the most recent
  ASSERT_TRUE(chunks.Load(file, 4, read).ok());
  EXPECT_EQ(chunks.Find(file, 1), nullptr);  // the least recent went
  EXPECT_NE(chunks.Find(file, 0), nullptr);
  EXPECT_NE(chunks.Find(file, 4), nullptr);
  EXPECT_EQ(chunks.counts().evicted, 1);
  EXPECT_EQ(chunks.counts().held_bytes, 400u);
  // A chunk held by a reader stays readable after it is let go.
  const ShardChunks::Chunk held = chunks.Find(file, 2);
  for (uint64_t chunk = 5; chunk < 10; ++chunk) {
    ASSERT_TRUE(chunks.Load(file, chunk, read).ok());
  }
  EXPECT_EQ(chunks.Find(file, 2), nullptr);
  EXPECT_EQ(*held, std::string(100, 'x'));
  EXPECT_LE(chunks.counts().held_bytes, 400u);
}

TEST(ShardChunksTest, ChunksAreAtMostAQuarterOfTheMemory) {
  EXPECT_EQ(ShardChunks(8 << 20, 16 << 20).chunk_bytes(), uint64_t{4} << 20);
  EXPECT_EQ(ShardChunks(1 << 20, 16 << 20).chunk_bytes(), uint64_t{1} << 20);
}

}  // namespace
}  // namespace heterodl
