// Test helpers for the data server and the remote loader together,
// in-process on loopback: a server that runs for a scope, and a fixture with
// a 60-image dataset (3 classes x 20 JPEGs) and the loader options and reads
// that the server and loader tests share.
//
//   class MyTest : public testing::ServedDatasetTest {};
//   TEST_F(MyTest, Reads) {
//     testing::RunningServer server(*dataset_);
//     auto loader = RemoteLoader::Connect(LoaderOptions({server.address()}, 0, 1));
//     std::vector<Batch> epoch = ReadEpoch(**loader, 0);
//   }
#ifndef HETERODL_TESTS_TESTING_SERVED_DATASET_H_
#define HETERODL_TESTS_TESTING_SERVED_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "src/client/remote_loader.h"
#include "src/server/data_server.h"

namespace heterodl::testing {

// What the test servers run unless told otherwise: 32 x 32 outputs.
inline constexpr char kTestPipeline[] = "random_resized_crop(32)|hflip(0.5)";

// A server running in this process (2 threads, kTestPipeline), stopped and
// joined on destruction. One that cannot start fails the test with the
// reason (and serves nothing: its address() refuses connections).
class RunningServer {
 public:
  explicit RunningServer(const std::string& dataset, const std::string& address = "127.0.0.1:0",
                         const std::string& auth_token = "", int pixel_port = 0);
  // Any other settings: start from Options(dataset).
  explicit RunningServer(const DataServerOptions& options);
  ~RunningServer();

  // What the first constructor runs.
  static DataServerOptions Options(const std::string& dataset,
                                   const std::string& address = "127.0.0.1:0");

  RunningServer(const RunningServer&) = delete;
  RunningServer& operator=(const RunningServer&) = delete;

  // Asks the server to stop and waits until it has.
  void Stop();
  // Waits until the server has stopped by itself (after a Shutdown RPC).
  void Join();

  const std::string& address() const { return address_; }

 private:
  std::unique_ptr<DataServer> server_;
  std::string address_;
  std::thread waiter_;
  absl::Status ended_;
};

// The shared dataset and the loader options of the server and loader tests.
class ServedDatasetTest : public ::testing::Test {
 protected:
  // Once per process: the suites derived from this one run it again.
  static void SetUpTestSuite();

  // Batches of 7, seed 11, 10 s connect and stall timeouts.
  static RemoteLoaderOptions LoaderOptions(std::vector<std::string> servers, uint32_t rank,
                                           uint32_t world_size);
  // Sets `epoch` and reads it to its end; a failed read fails the test and
  // ends the epoch there.
  static std::vector<Batch> ReadEpoch(RemoteLoader& loader, uint32_t epoch);

  // The image folder's path.
  static std::string* dataset_;
};

// Polls `loader` until it has received more than `batches` (it fetched
// ahead), for up to 10 s; false if it never did.
bool AwaitReceived(const RemoteLoader& loader, int64_t batches);

}  // namespace heterodl::testing

#endif  // HETERODL_TESTS_TESTING_SERVED_DATASET_H_
