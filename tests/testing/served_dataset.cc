#include "tests/testing/served_dataset.h"

#include <optional>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/rpc/grpc_lifetime.h"
#include "tests/testing/test_images.h"

namespace heterodl::testing {

DataServerOptions RunningServer::Options(const std::string& dataset, const std::string& address) {
  DataServerOptions options;
  options.dataset = dataset;
  options.pipeline = kTestPipeline;
  options.address = address;
  options.threads = 2;
  options.drain_timeout = absl::Milliseconds(200);
  return options;
}

RunningServer::RunningServer(const std::string& dataset, const std::string& address,
                             const std::string& auth_token, int pixel_port)
    : RunningServer([&] {
        DataServerOptions options = Options(dataset, address);
        options.auth_token = auth_token;
        options.pixel_port = pixel_port;
        return options;
      }()) {}

RunningServer::RunningServer(const DataServerOptions& options) {
  absl::StatusOr<std::unique_ptr<DataServer>> server = DataServer::Start(options);
  if (!server.ok()) {
    ADD_FAILURE() << "the data server did not start: " << server.status();
    address_ = "127.0.0.1:1";
    return;
  }
  server_ = *std::move(server);
  address_ = absl::StrCat("127.0.0.1:", server_->port());
  waiter_ = std::thread([this] { ended_ = server_->Wait(); });
}

RunningServer::~RunningServer() { Stop(); }

void RunningServer::Stop() {
  if (!waiter_.joinable()) {
    return;
  }
  server_->RequestStop("test");
  waiter_.join();
}

void RunningServer::Join() {
  if (waiter_.joinable()) {
    waiter_.join();
  }
}

std::string* ServedDatasetTest::dataset_ = nullptr;

void ServedDatasetTest::SetUpTestSuite() {
  // As the programs do: no server's destructor waits for gRPC's shutdown.
  KeepGrpcUntilExit();
  if (dataset_ == nullptr) {
    dataset_ = new std::string(MakeImageFolder("server", 3, 20).string());
  }
}

RemoteLoaderOptions ServedDatasetTest::LoaderOptions(std::vector<std::string> servers,
                                                     uint32_t rank, uint32_t world_size) {
  RemoteLoaderOptions options;
  options.servers.fixed = std::move(servers);
  options.batch_size = 7;
  options.rank = rank;
  options.world_size = world_size;
  options.seed = 11;
  options.connect_timeout = absl::Seconds(10);
  options.stall_timeout = absl::Seconds(10);
  return options;
}

std::vector<Batch> ServedDatasetTest::ReadEpoch(RemoteLoader& loader, uint32_t epoch) {
  EXPECT_TRUE(loader.SetEpoch(epoch).ok());
  std::vector<Batch> batches;
  while (true) {
    absl::StatusOr<std::optional<Batch>> batch = loader.Next();
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (!batch.ok() || !batch->has_value()) {
      break;
    }
    batches.push_back(std::move(**batch));
  }
  return batches;
}

bool AwaitReceived(const RemoteLoader& loader, int64_t batches) {
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (loader.stats().received <= batches) {
    if (absl::Now() > give_up) {
      return false;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

}  // namespace heterodl::testing
