// The remote loader when data servers go away, mid-epoch, at an epoch's end
// or between epochs, and when they come back: every sample still reaches the
// rank exactly once, in order.
#include <functional>
#include <memory>
#include <optional>
#include <set>

#include "gtest/gtest.h"
#include "src/client/remote_loader.h"
#include "src/client/server_status.h"
#include "tests/testing/served_dataset.h"

namespace heterodl {
namespace {

using testing::AwaitReceived;
using testing::RunningServer;

// Two servers, A and B, serving one rank 30 batches of 2 (each connection
// keeps at least two requested, so A holds work when something happens to
// it).
class FailoverTest : public testing::ServedDatasetTest {
 protected:
  std::unique_ptr<RemoteLoader> Connect(const std::vector<std::string>& servers) {
    RemoteLoaderOptions options = LoaderOptions(servers, 0, 1);
    options.batch_size = 2;
    absl::StatusOr<std::unique_ptr<RemoteLoader>> loader = RemoteLoader::Connect(options);
    EXPECT_TRUE(loader.ok()) << loader.status();
    return loader.ok() ? *std::move(loader) : nullptr;
  }
  // Reads `epoch` in order, calling `after(k)` after the k-th batch (from 1),
  // and checks every sample arrived exactly once.
  static void ReadEpochChecked(RemoteLoader& loader, uint32_t epoch,
                               const std::function<void(int64_t)>& after) {
    ASSERT_TRUE(loader.SetEpoch(epoch).ok());
    std::multiset<int64_t> seen;
    int64_t k = 0;
    while (true) {
      absl::StatusOr<std::optional<Batch>> batch = loader.Next();
      ASSERT_TRUE(batch.ok()) << batch.status();
      if (!batch->has_value()) break;
      EXPECT_EQ((*batch)->epoch, epoch);
      EXPECT_EQ((*batch)->index, k);  // in order
      seen.insert((*batch)->indices.begin(), (*batch)->indices.end());
      after(++k);
    }
    EXPECT_EQ(k, 30);
    ASSERT_EQ(seen.size(), 60u);
    for (int64_t i = 0; i < 60; ++i) EXPECT_EQ(seen.count(i), 1u) << i;
  }
  void ReadEpochChecked(const std::vector<std::string>& servers,
                        const std::function<void(int64_t)>& after) {
    std::unique_ptr<RemoteLoader> loader = Connect(servers);
    ASSERT_NE(loader, nullptr);
    ReadEpochChecked(*loader, 0, after);
  }
};

TEST_F(FailoverTest, AServerLostAtAnEpochBoundaryLosesNothing) {
  auto a = std::make_unique<RunningServer>(*dataset_);
  RunningServer b(*dataset_);
  std::unique_ptr<RemoteLoader> loader = Connect({a->address(), b.address()});
  ASSERT_NE(loader, nullptr);
  // A goes away as the trainer takes the epoch's last batches, while the
  // loader fetches the next epoch's first ones from both servers.
  ReadEpochChecked(*loader, 0, [&](int64_t k) {
    if (k == 29) a.reset();
  });
  ReadEpochChecked(*loader, 1, [](int64_t) {});
  // Then a server lost between two epochs, once the next one is fetched.
  auto c = std::make_unique<RunningServer>(*dataset_);
  std::unique_ptr<RemoteLoader> second = Connect({c->address(), b.address()});
  ASSERT_NE(second, nullptr);
  ReadEpochChecked(*second, 4, [](int64_t) {});
  ASSERT_TRUE(AwaitReceived(*second, 30));
  c.reset();
  ReadEpochChecked(*second, 5, [](int64_t) {});
  EXPECT_EQ(second->stats().dropped, 0);
}

TEST_F(FailoverTest, ServerFailureMidEpochLosesNothing) {
  auto a = std::make_unique<RunningServer>(*dataset_);
  RunningServer b(*dataset_);
  ReadEpochChecked({a->address(), b.address()}, [&](int64_t k) {
    if (k == 5) a.reset();  // server A goes away with batches in flight
  });
}

TEST_F(FailoverTest, AServerThatComesBackIsUsedAgain) {
  auto a = std::make_unique<RunningServer>(*dataset_);
  const std::string address_a = a->address();
  RunningServer b(*dataset_);
  std::unique_ptr<RemoteLoader> loader = Connect({address_a, b.address()});
  ASSERT_NE(loader, nullptr);
  const auto served_by_a = [&] {
    absl::StatusOr<v1::ServerStats> status = FetchServerStatus(address_a, absl::Seconds(5));
    EXPECT_TRUE(status.ok()) << status.status();
    return status.ok() ? status->batches_sent() : 0;
  };
  ReadEpochChecked(*loader, 0, [&](int64_t k) {
    if (k == 3) a.reset();  // A goes away
    if (k == 6) {
      // And comes back; the trainer waits until the loader is there again
      // (its backoff, gRPC's reconnection).
      a = std::make_unique<RunningServer>(*dataset_, address_a);
      const absl::Time give_up = absl::Now() + absl::Seconds(30);
      while (absl::Now() < give_up) {
        absl::StatusOr<v1::ServerStats> status = FetchServerStatus(address_a, absl::Seconds(5));
        if (status.ok() && status->active_streams() > 0) break;
        absl::SleepFor(absl::Milliseconds(50));
      }
    }
  });
  // B fetched far ahead meanwhile (these batches are tiny): A is asked again
  // as the trainer moves on and the window's end reaches past what B holds.
  for (uint32_t epoch = 1; epoch < 30 && served_by_a() == 0; ++epoch) {
    ReadEpochChecked(*loader, epoch, [](int64_t) {});
  }
  EXPECT_GT(served_by_a(), 0u);  // the new server at A's address served batches
}

}  // namespace
}  // namespace heterodl
