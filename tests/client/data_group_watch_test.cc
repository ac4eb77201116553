#include "src/client/data_group_watch.h"

#include <gtest/gtest.h>

#include <memory>

#include "absl/time/clock.h"
#include "src/client/remote_loader.h"
#include "tests/testing/served_dataset.h"

namespace heterodl {
namespace {

class DataGroupWatchTest : public testing::ServedDatasetTest {};

std::optional<DataGroupCapacity> AwaitCapacity(const DataGroupWatch& watch) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    if (std::optional<DataGroupCapacity> capacity = watch.capacity()) {
      return capacity;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return std::nullopt;
}

TEST_F(DataGroupWatchTest, MeasuresTheServersThatHaveBuiltSomething) {
  testing::RunningServer busy(*dataset_);
  testing::RunningServer idle(*dataset_);
  // Not a server at all: left out, never waited for long.
  DataGroupWatch watch(ServerSources{{busy.address(), idle.address(), "127.0.0.1:1"}, "", ""}, "",
                       {}, absl::Milliseconds(50), absl::Milliseconds(50));
  // Nothing built anywhere: after two whole rounds, nothing to measure.
  ASSERT_TRUE(watch.AwaitRounds(2, absl::Seconds(30)));
  EXPECT_FALSE(watch.capacity().has_value());

  absl::StatusOr<std::unique_ptr<RemoteLoader>> loader =
      RemoteLoader::Connect(LoaderOptions({busy.address()}, 0, 1));
  ASSERT_TRUE(loader.ok()) << loader.status();
  ASSERT_FALSE(ReadEpoch(**loader, 0).empty());

  const std::optional<DataGroupCapacity> capacity = AwaitCapacity(watch);
  ASSERT_TRUE(capacity.has_value());
  EXPECT_EQ(capacity->hosts, 1);  // the idle server has built nothing
  EXPECT_GT(capacity->per_host, 0);
}

}  // namespace
}  // namespace heterodl
