// The remote loader against real data servers, in-process on loopback: what
// each rank receives, in which order, and what it says when it cannot.
#include "src/client/remote_loader.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <set>

#include "gtest/gtest.h"
#include "src/client/server_status.h"
#include "tests/testing/served_dataset.h"
#include "tests/testing/test_images.h"

namespace heterodl {
namespace {

using testing::AwaitReceived;
using testing::RunningServer;

class RemoteLoaderTest : public testing::ServedDatasetTest {};

TEST_F(RemoteLoaderTest, EverySampleReachesExactlyOneRankInOrder) {
  RunningServer a(*dataset_), b(*dataset_);
  std::multiset<int64_t> seen;
  for (uint32_t rank = 0; rank < 3; ++rank) {
    absl::StatusOr<std::unique_ptr<RemoteLoader>> loader =
        RemoteLoader::Connect(LoaderOptions({a.address(), b.address()}, rank, 3));
    ASSERT_TRUE(loader.ok()) << loader.status();
    EXPECT_EQ((*loader)->dataset().num_samples, 60u);
    EXPECT_EQ((*loader)->size(), 3);  // 20 samples per rank in batches of 7
    std::vector<Batch> batches = ReadEpoch(**loader, 0);
    ASSERT_EQ(batches.size(), 3u);
    for (size_t k = 0; k < batches.size(); ++k) {
      EXPECT_EQ(batches[k].index, static_cast<int64_t>(k));
      EXPECT_EQ(batches[k].height(), 32);
      EXPECT_EQ(batches[k].payload.size(), static_cast<size_t>(batches[k].size()) * 32 * 32 * 3);
      seen.insert(batches[k].indices.begin(), batches[k].indices.end());
    }
    EXPECT_EQ(batches.back().size(), 6);
  }
  ASSERT_EQ(seen.size(), 60u);
  for (int64_t i = 0; i < 60; ++i) {
    EXPECT_EQ(seen.count(i), 1u) << i;
  }
  // Both servers report per-stage times for what they served.
  uint64_t samples = 0;
  for (const std::string& address : {a.address(), b.address()}) {
    absl::StatusOr<v1::ServerStats> status = FetchServerStatus(address, absl::Seconds(5));
    ASSERT_TRUE(status.ok()) << status.status();
    samples += status->samples_sent();
    if (status->batches_sent() > 0) {
      EXPECT_GT(status->read_seconds(), 0);
      EXPECT_GT(status->decode_seconds(), 0);
      EXPECT_GT(status->send_seconds(), 0);
      EXPECT_GT(status->peak_rss_bytes(), 0u);
    }
  }
  // At least the epoch: the loaders fetched ahead into the next ones too.
  EXPECT_GE(samples, 60u);
}

TEST_F(RemoteLoaderTest, AnyServerBuildsTheSameBatchBitForBit) {
  RunningServer a(*dataset_), b(*dataset_);
  auto from_a = RemoteLoader::Connect(LoaderOptions({a.address()}, 1, 2));
  auto from_b = RemoteLoader::Connect(LoaderOptions({b.address()}, 1, 2));
  ASSERT_TRUE(from_a.ok() && from_b.ok());
  std::vector<Batch> batches_a = ReadEpoch(**from_a, 2);
  std::vector<Batch> batches_b = ReadEpoch(**from_b, 2);
  ASSERT_EQ(batches_a.size(), batches_b.size());
  for (size_t k = 0; k < batches_a.size(); ++k) {
    EXPECT_EQ(batches_a[k].payload.view(), batches_b[k].payload.view()) << k;
    EXPECT_EQ(batches_a[k].labels, batches_b[k].labels);
    EXPECT_EQ(batches_a[k].indices, batches_b[k].indices);
  }
}

TEST_F(RemoteLoaderTest, ResumesAtAGivenBatch) {
  RunningServer a(*dataset_);
  auto loader = RemoteLoader::Connect(LoaderOptions({a.address()}, 0, 1));
  ASSERT_TRUE(loader.ok());
  std::vector<Batch> all = ReadEpoch(**loader, 1);
  ASSERT_TRUE((*loader)->SetEpoch(1, 5).ok());
  absl::StatusOr<std::optional<Batch>> resumed = (*loader)->Next();
  ASSERT_TRUE(resumed.ok() && resumed->has_value());
  EXPECT_EQ((*resumed)->index, 5);
  EXPECT_EQ((*resumed)->payload.view(), all[5].payload.view());
  EXPECT_EQ((*loader)->position().next_batch, 6);
}

TEST_F(RemoteLoaderTest, BatchesFetchedAheadAreKeptAtTheBoundaryAndDroppedElsewhere) {
  RunningServer server(*dataset_);
  auto loader = RemoteLoader::Connect(LoaderOptions({server.address()}, 0, 1));
  auto fresh = RemoteLoader::Connect(LoaderOptions({server.address()}, 0, 1));
  ASSERT_TRUE(loader.ok() && fresh.ok());
  ASSERT_EQ((*loader)->size(), 9);
  ReadEpoch(**loader, 0);
  // While the trainer does something else, the next epoch arrives.
  ASSERT_TRUE(AwaitReceived(**loader, 9));
  const std::vector<Batch> next = ReadEpoch(**loader, 1);
  const std::vector<Batch> expected = ReadEpoch(**fresh, 1);
  ASSERT_EQ(next.size(), expected.size());
  for (size_t k = 0; k < next.size(); ++k) {
    EXPECT_EQ(next[k].indices, expected[k].indices);
    EXPECT_EQ(next[k].payload.view(), expected[k].payload.view());
  }
  EXPECT_EQ((*loader)->stats().dropped, 0);
  // Epoch 2 arrives ahead too; the trainer resumes elsewhere instead.
  ASSERT_TRUE(AwaitReceived(**loader, 18));
  ASSERT_TRUE((*loader)->SetEpoch(5, 3).ok());
  ASSERT_TRUE((*fresh)->SetEpoch(5, 3).ok());
  for (int64_t k = 3; k < 9; ++k) {
    absl::StatusOr<std::optional<Batch>> got = (*loader)->Next();
    absl::StatusOr<std::optional<Batch>> want = (*fresh)->Next();
    ASSERT_TRUE(got.ok() && got->has_value() && want.ok() && want->has_value());
    EXPECT_EQ((*got)->epoch, 5u);
    EXPECT_EQ((*got)->index, k);
    EXPECT_EQ((*got)->indices, (*want)->indices);
  }
  EXPECT_GT((*loader)->stats().dropped, 0);
}

TEST_F(RemoteLoaderTest, ASequentialLoaderReadsTheDatasetInOrder) {
  RunningServer server(*dataset_);
  for (const uint32_t world_size : {1u, 3u}) {
    RemoteLoaderOptions options = LoaderOptions({server.address()}, world_size - 1, world_size);
    options.shuffle = false;
    auto loader = RemoteLoader::Connect(options);
    ASSERT_TRUE(loader.ok()) << loader.status();
    for (const uint32_t epoch : {0u, 3u}) {
      std::vector<int64_t> indices;
      for (const Batch& batch : ReadEpoch(**loader, epoch)) {
        indices.insert(indices.end(), batch.indices.begin(), batch.indices.end());
      }
      // DistributedSampler's split of 0..59 without shuffling.
      std::vector<int64_t> expected;
      for (int64_t i = world_size - 1; i < 60; i += world_size) {
        expected.push_back(i);
      }
      EXPECT_EQ(indices, expected) << "world " << world_size << " epoch " << epoch;
    }
  }
  // The default shuffles.
  auto shuffled = RemoteLoader::Connect(LoaderOptions({server.address()}, 0, 1));
  ASSERT_TRUE(shuffled.ok());
  std::vector<int64_t> indices;
  for (const Batch& batch : ReadEpoch(**shuffled, 0)) {
    indices.insert(indices.end(), batch.indices.begin(), batch.indices.end());
  }
  EXPECT_FALSE(std::is_sorted(indices.begin(), indices.end()));
}

TEST_F(RemoteLoaderTest, ASlowTrainerIsNotAStall) {
  RunningServer a(*dataset_);
  RemoteLoaderOptions options = LoaderOptions({a.address()}, 0, 1);
  options.stall_timeout = absl::Milliseconds(500);
  auto loader = RemoteLoader::Connect(options);
  ASSERT_TRUE(loader.ok());
  ASSERT_TRUE((*loader)->SetEpoch(0).ok());
  int delivered = 0;
  while (true) {
    absl::StatusOr<std::optional<Batch>> batch = (*loader)->Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    if (!batch->has_value()) {
      break;
    }
    if (++delivered <= 2) {
      absl::SleepFor(absl::Milliseconds(800));  // a long training step
    }
  }
  EXPECT_EQ(delivered, 9);
}

TEST_F(RemoteLoaderTest, DatasetMismatchNamesBothServers) {
  RunningServer a(*dataset_);
  RunningServer other(testing::MakeImageFolder("server_other", 2, 5).string());
  auto loader = RemoteLoader::Connect(LoaderOptions({a.address(), other.address()}, 0, 1));
  ASSERT_FALSE(loader.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(loader.status()));
  EXPECT_NE(loader.status().message().find(a.address()), std::string::npos) << loader.status();
  EXPECT_NE(loader.status().message().find(other.address()), std::string::npos);
}

TEST_F(RemoteLoaderTest, UnreachableServersAreNamedWithWhy) {
  RemoteLoaderOptions options = LoaderOptions({"127.0.0.1:1"}, 0, 1);
  options.connect_timeout = absl::Milliseconds(300);
  auto loader = RemoteLoader::Connect(options);
  ASSERT_FALSE(loader.ok());
  EXPECT_TRUE(absl::IsUnavailable(loader.status())) << loader.status();
  EXPECT_NE(loader.status().message().find("127.0.0.1:1"), std::string::npos) << loader.status();
  EXPECT_NE(loader.status().message().find("Connection refused"), std::string::npos)
      << loader.status();
}

TEST_F(RemoteLoaderTest, MalformedAddressesAreRefusedBeforeAnyWait) {
  for (const char* address : {"nohost", "127.0.0.1:99999", "127.0.0.1:0", ":50051", "::1:5"}) {
    RemoteLoaderOptions options = LoaderOptions({address}, 0, 1);
    options.connect_timeout = absl::Hours(1);  // a wait would hang the test
    auto loader = RemoteLoader::Connect(options);
    EXPECT_TRUE(absl::IsInvalidArgument(loader.status())) << address << ": " << loader.status();
  }
}

TEST_F(RemoteLoaderTest, AnInterruptEndsTheWaitForServers) {
  RemoteLoaderOptions options = LoaderOptions({"127.0.0.1:1"}, 0, 1);
  options.connect_timeout = absl::Hours(1);
  int asked = 0;
  options.interrupt_connect = [&asked] { return ++asked == 3; };
  auto loader = RemoteLoader::Connect(options);
  EXPECT_TRUE(absl::IsCancelled(loader.status())) << loader.status();
  EXPECT_EQ(asked, 3);
}

TEST_F(RemoteLoaderTest, APipelineTheServersCannotParseFailsConnect) {
  RunningServer server(*dataset_);
  RemoteLoaderOptions options = LoaderOptions({server.address()}, 0, 1);
  options.pipeline = "center_crop(16)|hflp(0.5)";
  auto loader = RemoteLoader::Connect(options);
  EXPECT_TRUE(absl::IsInvalidArgument(loader.status())) << loader.status();
  EXPECT_NE(loader.status().message().find("unknown operation 'hflp'"), std::string::npos)
      << loader.status();
}

TEST_F(RemoteLoaderTest, AnInterruptEndsAWaitForABatchAndTheLoaderGoesOn) {
  RunningServer server(*dataset_);
  RemoteLoaderOptions options = LoaderOptions({server.address()}, 0, 1);
  std::atomic<bool> interrupt{true};
  options.interrupt_next = [&interrupt] { return interrupt.exchange(false); };
  auto loader = RemoteLoader::Connect(options);
  ASSERT_TRUE(loader.ok()) << loader.status();
  // The first Next() waits for the first batch: the interrupt ends that
  // wait (unless the batch was already there); the next call delivers.
  absl::StatusOr<std::optional<Batch>> first = (*loader)->Next();
  if (!first.ok()) {
    EXPECT_TRUE(absl::IsCancelled(first.status())) << first.status();
    first = (*loader)->Next();
  }
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->has_value());
  EXPECT_EQ((*first)->index, 0);
}

}  // namespace
}  // namespace heterodl
