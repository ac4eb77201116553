// The remote loader when data servers go away, mid-epoch, at an epoch's end
// or between epochs, and when they come back: every sample still reaches the
// rank exactly once, in order.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "src/client/remote_loader.h"
#include "src/client/server_status.h"
#include "src/server/data_server.h"
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
  std::unique_ptr<RemoteLoader> Connect(const std::vector<std::string>& servers,
                                        absl::Duration stall_timeout = absl::Seconds(10)) {
    RemoteLoaderOptions options = LoaderOptions(servers, 0, 1);
    options.batch_size = 2;
    options.stall_timeout = stall_timeout;
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
      if (!batch->has_value()) {
        break;
      }
      EXPECT_EQ((*batch)->epoch, epoch);
      EXPECT_EQ((*batch)->index, k);  // in order
      seen.insert((*batch)->indices.begin(), (*batch)->indices.end());
      after(++k);
    }
    EXPECT_EQ(k, 30);
    ASSERT_EQ(seen.size(), 60u);
    for (int64_t i = 0; i < 60; ++i) {
      EXPECT_EQ(seen.count(i), 1u) << i;
    }
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
    if (k == 29) {
      a.reset();
    }
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
    if (k == 5) {
      a.reset();  // server A goes away with batches in flight
    }
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
    if (k == 3) {
      a.reset();  // A goes away
    }
    if (k == 6) {
      // And comes back; the trainer waits until the loader is there again
      // (its backoff, gRPC's reconnection).
      a = std::make_unique<RunningServer>(*dataset_, address_a);
      const absl::Time give_up = absl::Now() + absl::Seconds(30);
      while (absl::Now() < give_up) {
        absl::StatusOr<v1::ServerStats> status = FetchServerStatus(address_a, absl::Seconds(5));
        if (status.ok() && status->active_streams() > 0) {
          break;
        }
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

TEST_F(FailoverTest, AServerLeavingPolitelyHandsItsBatchesBackAtOnce) {
  auto a = std::make_unique<RunningServer>(*dataset_);
  RunningServer b(*dataset_);
  // A stall timeout far beyond the test's: only A's leaving can hand its
  // batches to B in time.
  std::unique_ptr<RemoteLoader> loader = Connect({a->address(), b.address()}, absl::Minutes(30));
  ASSERT_NE(loader, nullptr);
  ReadEpochChecked(*loader, 0, [&](int64_t k) {
    if (k == 5) {
      a->Stop();  // what SIGTERM does: the server leaves
    }
  });
  ReadEpochChecked(*loader, 1, [](int64_t) {});
  EXPECT_EQ(loader->stats().stalled, 0);
}

// Servers found while the loader runs: a servers file that a script
// rewrites (a new file renamed over the old).
class ElasticTest : public FailoverTest {
 protected:
  void SetUp() override {
    servers_file_ = ::testing::TempDir() + "/servers_" +
                    ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove(servers_file_);
  }
  void List(const std::vector<std::string>& servers) {
    std::ofstream(servers_file_ + ".new") << absl::StrJoin(servers, "\n") << "\n";
    std::filesystem::rename(servers_file_ + ".new", servers_file_);
  }
  // A loader that follows the file. Its memory bound is far beyond what
  // the servers keep asked (the window is then twice that), as it is
  // whenever a trainer waits for data: servers joining get work at once.
  RemoteLoaderOptions ListedOptions() const {
    RemoteLoaderOptions options = LoaderOptions({}, 0, 1);
    options.batch_size = 2;
    options.servers.servers_file = servers_file_;
    options.discovery_interval = absl::Milliseconds(50);
    return options;
  }
  std::unique_ptr<RemoteLoader> ConnectListed() {
    absl::StatusOr<std::unique_ptr<RemoteLoader>> loader = RemoteLoader::Connect(ListedOptions());
    EXPECT_TRUE(loader.ok()) << loader.status();
    return loader.ok() ? *std::move(loader) : nullptr;
  }
  // Waits up to 10 s for the loader to use exactly `servers`.
  static bool AwaitServers(const RemoteLoader& loader, std::vector<std::string> servers) {
    std::sort(servers.begin(), servers.end());
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (absl::Now() < give_up) {
      if (loader.stats().servers == servers) {
        return true;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }
  static uint64_t ServedBy(const std::string& address) {
    absl::StatusOr<v1::ServerStats> status = FetchServerStatus(address, absl::Seconds(5));
    EXPECT_TRUE(status.ok()) << status.status();
    return status.ok() ? status->batches_sent() : 0;
  }

  std::string servers_file_;
};

TEST_F(ElasticTest, ServersJoiningAndLeavingTheListMidEpochLoseNothing) {
  RunningServer a(*dataset_);
  RunningServer b(*dataset_);
  RunningServer c(*dataset_);
  List({a.address()});
  std::unique_ptr<RemoteLoader> loader = ConnectListed();
  ASSERT_NE(loader, nullptr);
  ReadEpochChecked(*loader, 0, [&](int64_t k) {
    if (k == 3) {
      List({a.address(), b.address(), c.address()});
      EXPECT_TRUE(AwaitServers(*loader, {a.address(), b.address(), c.address()}));
    }
  });
  // A alone may have built the rest of that epoch (these batches are tiny)
  // before B and C were connected; they are asked as the trainer goes on.
  uint32_t epoch = 1;
  for (; epoch < 40 && (ServedBy(b.address()) == 0 || ServedBy(c.address()) == 0); ++epoch) {
    ReadEpochChecked(*loader, epoch, [](int64_t) {});
  }
  EXPECT_GT(ServedBy(b.address()), 0u);
  EXPECT_GT(ServedBy(c.address()), 0u);
  ReadEpochChecked(*loader, epoch++, [&](int64_t k) {
    if (k == 10) {
      List({a.address(), b.address()});  // C leaves the list, with batches asked of it
      EXPECT_TRUE(AwaitServers(*loader, {a.address(), b.address()}));
    }
  });
  const uint64_t served_by_c = ServedBy(c.address());
  ReadEpochChecked(*loader, epoch++, [&](int64_t k) {
    if (k == 10) {
      List({b.address()});  // the first one goes, too
    }
  });
  EXPECT_TRUE(AwaitServers(*loader, {b.address()}));
  ReadEpochChecked(*loader, epoch++, [](int64_t) {});
  EXPECT_EQ(ServedBy(c.address()), served_by_c);  // asked nothing once unlisted
}

TEST_F(ElasticTest, AListedServerOfAnotherDatasetOrTokenIsNotUsed) {
  RunningServer a(*dataset_);
  DataServerOptions other;
  other.synthetic_samples = 60;  // another dataset, another fingerprint
  other.address = "127.0.0.1:0";
  other.threads = 1;
  absl::StatusOr<std::unique_ptr<DataServer>> stranger = DataServer::Start(other);
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  const std::string stranger_address = absl::StrCat("127.0.0.1:", (*stranger)->port());
  List({a.address()});
  std::unique_ptr<RemoteLoader> loader = ConnectListed();
  ASSERT_NE(loader, nullptr);
  // And one that wants a token this loader does not have.
  RunningServer locked(*dataset_, "127.0.0.1:0", "another-token");
  ReadEpochChecked(*loader, 0, [&](int64_t k) {
    if (k == 2) {
      List({a.address(), stranger_address, locked.address()});
    }
  });
  ReadEpochChecked(*loader, 1, [](int64_t) {});
  EXPECT_EQ(ServedBy(stranger_address), 0u);
  absl::StatusOr<v1::ServerStats> locked_stats =
      FetchServerStatus(locked.address(), absl::Seconds(5), "another-token");
  ASSERT_TRUE(locked_stats.ok()) << locked_stats.status();
  EXPECT_EQ(locked_stats->batches_sent(), 0u);
  (*stranger)->RequestStop("test over");
  EXPECT_TRUE((*stranger)->Wait().ok());
}

TEST_F(ElasticTest, ConnectWaitsForTheFirstServerToBeListed) {
  RunningServer a(*dataset_);
  // Listed once Connect is waiting for a server (it asks whether it was
  // interrupted only while it waits), not after a guess at a delay.
  absl::Notification waiting;
  RemoteLoaderOptions options = ListedOptions();
  options.interrupt_connect = [&] {
    if (!waiting.HasBeenNotified()) {
      waiting.Notify();
    }
    return false;
  };
  std::thread lister([&] {
    waiting.WaitForNotification();
    List({a.address()});
  });
  absl::StatusOr<std::unique_ptr<RemoteLoader>> loader = RemoteLoader::Connect(options);
  lister.join();
  ASSERT_TRUE(loader.ok()) << loader.status();
  ReadEpochChecked(**loader, 0, [](int64_t) {});
}

TEST_F(ElasticTest, EveryAddressOfADnsNameIsAServer) {
  RunningServer a(*dataset_);
  const std::string port = a.address().substr(a.address().rfind(':') + 1);
  RemoteLoaderOptions options = LoaderOptions({}, 0, 1);
  options.batch_size = 2;
  options.servers.dns_name = "localhost:" + port;  // 127.0.0.1, and ::1 where it is on
  options.discovery_interval = absl::Milliseconds(50);
  absl::StatusOr<std::unique_ptr<RemoteLoader>> loader = RemoteLoader::Connect(options);
  ASSERT_TRUE(loader.ok()) << loader.status();
  const std::vector<std::string> servers = (*loader)->stats().servers;
  EXPECT_NE(std::find(servers.begin(), servers.end(), a.address()), servers.end());
  ReadEpochChecked(**loader, 0, [](int64_t) {});
}

TEST_F(ElasticTest, NoServerListedInTimeIsAClearError) {
  RemoteLoaderOptions options = LoaderOptions({}, 0, 1);
  options.servers.servers_file = servers_file_;
  options.connect_timeout = absl::Milliseconds(300);
  absl::StatusOr<std::unique_ptr<RemoteLoader>> loader = RemoteLoader::Connect(options);
  ASSERT_FALSE(loader.ok());
  EXPECT_TRUE(absl::IsUnavailable(loader.status()));
  EXPECT_NE(loader.status().message().find(servers_file_), std::string::npos);
}

}  // namespace
}  // namespace heterodl
