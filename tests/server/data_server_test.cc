// The data server and the remote loader together, in-process on loopback.
#include "src/server/data_server.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"
#include "heterodl/data_service.grpc.pb.h"
#include "src/client/remote_loader.h"
#include "src/client/shutdown.h"
#include "src/client/server_status.h"
#include "src/data/dataset.h"
#include "src/wire/byte_stream.h"
#include "src/wire/pixel_channel_reader.h"
#include "tests/testing/test_images.h"

namespace heterodl {
namespace {

constexpr char kPipeline[] = "random_resized_crop(32)|hflip(0.5)";

// A server running in this process, stopped and joined on destruction. One
// that cannot start fails the test with the reason (and serves nothing: its
// address() refuses connections).
class RunningServer {
 public:
  explicit RunningServer(const std::string& dataset, const std::string& address = "127.0.0.1:0",
                         const std::string& auth_token = "", int pixel_port = 0) {
    DataServerOptions options;
    options.auth_token = auth_token;
    options.pixel_port = pixel_port;
    options.dataset = dataset;
    options.pipeline = kPipeline;
    options.address = address;
    options.threads = 2;
    options.drain_timeout = absl::Milliseconds(200);
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
  ~RunningServer() { Stop(); }

  void Stop() {
    if (!waiter_.joinable()) return;
    server_->RequestStop("test");
    waiter_.join();
  }
  // Joins after a Shutdown RPC.
  void Join() {
    if (waiter_.joinable()) waiter_.join();
  }

  const std::string& address() const { return address_; }

 private:
  std::unique_ptr<DataServer> server_;
  std::string address_;
  std::thread waiter_;
  absl::Status ended_;
};

class DataServerTest : public ::testing::Test {
 protected:
  // Once per process: the suites derived from this one run it again.
  static void SetUpTestSuite() {
    if (dataset_ == nullptr) {
      dataset_ = new std::string(testing::MakeImageFolder("server", 3, 20).string());
    }
  }
  RemoteLoaderOptions LoaderOptions(std::vector<std::string> servers, uint32_t rank,
                                    uint32_t world_size) {
    RemoteLoaderOptions options;
    options.servers = std::move(servers);
    options.batch_size = 7;
    options.rank = rank;
    options.world_size = world_size;
    options.seed = 11;
    options.connect_timeout = absl::Seconds(10);
    options.stall_timeout = absl::Seconds(10);
    return options;
  }
  static std::vector<Batch> ReadEpoch(RemoteLoader& loader, uint32_t epoch) {
    EXPECT_TRUE(loader.SetEpoch(epoch).ok());
    std::vector<Batch> batches;
    while (true) {
      absl::StatusOr<std::optional<Batch>> batch = loader.Next();
      EXPECT_TRUE(batch.ok()) << batch.status();
      if (!batch.ok() || !batch->has_value()) break;
      batches.push_back(std::move(**batch));
    }
    return batches;
  }

  static std::string* dataset_;
};
std::string* DataServerTest::dataset_ = nullptr;

TEST_F(DataServerTest, AServerThatCannotStartFailsTheTestWithItsReason) {
  EXPECT_NONFATAL_FAILURE(RunningServer("/no/such/dataset"), "/no/such/dataset");
}

TEST_F(DataServerTest, EverySampleReachesExactlyOneRankInOrder) {
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
      EXPECT_EQ(batches[k].height, 32);
      EXPECT_EQ(batches[k].images.size(), static_cast<size_t>(batches[k].size()) * 32 * 32 * 3);
      seen.insert(batches[k].indices.begin(), batches[k].indices.end());
    }
    EXPECT_EQ(batches.back().size(), 6);
  }
  ASSERT_EQ(seen.size(), 60u);
  for (int64_t i = 0; i < 60; ++i) EXPECT_EQ(seen.count(i), 1u) << i;
  // Both servers report per-stage times for what they served.
  uint64_t samples = 0;
  for (const std::string& address : {a.address(), b.address()}) {
    absl::StatusOr<ServerStatus> status = FetchServerStatus(address, absl::Seconds(5));
    ASSERT_TRUE(status.ok()) << status.status();
    samples += status->samples_sent;
    if (status->batches_sent > 0) {
      EXPECT_GT(status->read_seconds, 0);
      EXPECT_GT(status->decode_seconds, 0);
      EXPECT_GT(status->send_seconds, 0);
      EXPECT_GT(status->peak_rss_bytes, 0u);
    }
  }
  // At least the epoch: the loaders fetched ahead into the next ones too.
  EXPECT_GE(samples, 60u);
}

TEST_F(DataServerTest, AnyServerBuildsTheSameBatchBitForBit) {
  RunningServer a(*dataset_), b(*dataset_);
  auto from_a = RemoteLoader::Connect(LoaderOptions({a.address()}, 1, 2));
  auto from_b = RemoteLoader::Connect(LoaderOptions({b.address()}, 1, 2));
  ASSERT_TRUE(from_a.ok() && from_b.ok());
  std::vector<Batch> batches_a = ReadEpoch(**from_a, 2);
  std::vector<Batch> batches_b = ReadEpoch(**from_b, 2);
  ASSERT_EQ(batches_a.size(), batches_b.size());
  for (size_t k = 0; k < batches_a.size(); ++k) {
    EXPECT_EQ(batches_a[k].images.view(), batches_b[k].images.view()) << k;
    EXPECT_EQ(batches_a[k].labels, batches_b[k].labels);
    EXPECT_EQ(batches_a[k].indices, batches_b[k].indices);
  }
}

TEST_F(DataServerTest, ResumesAtAGivenBatch) {
  RunningServer a(*dataset_);
  auto loader = RemoteLoader::Connect(LoaderOptions({a.address()}, 0, 1));
  ASSERT_TRUE(loader.ok());
  std::vector<Batch> all = ReadEpoch(**loader, 1);
  ASSERT_TRUE((*loader)->SetEpoch(1, 5).ok());
  absl::StatusOr<std::optional<Batch>> resumed = (*loader)->Next();
  ASSERT_TRUE(resumed.ok() && resumed->has_value());
  EXPECT_EQ((*resumed)->index, 5);
  EXPECT_EQ((*resumed)->images.view(), all[5].images.view());
  EXPECT_EQ((*loader)->position().next_batch, 6);
}

// Two servers, A and B, serving one rank 30 batches of 2 (each connection
// keeps at least two requested, so A holds work when something happens to
// it).
class FailoverTest : public DataServerTest {
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

// Polls `loader` until it has received more than `batches` (it fetched
// ahead), for up to 10 s; false if it never did.
bool AwaitReceived(const RemoteLoader& loader, int64_t batches) {
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (loader.stats().received <= batches) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

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

TEST_F(DataServerTest, BatchesFetchedAheadAreKeptAtTheBoundaryAndDroppedElsewhere) {
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
    EXPECT_EQ(next[k].images.view(), expected[k].images.view());
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

TEST_F(DataServerTest, ASequentialLoaderReadsTheDatasetInOrder) {
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
      for (int64_t i = world_size - 1; i < 60; i += world_size) expected.push_back(i);
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
    absl::StatusOr<ServerStatus> status = FetchServerStatus(address_a, absl::Seconds(5));
    EXPECT_TRUE(status.ok()) << status.status();
    return status.ok() ? status->batches_sent : 0;
  };
  ReadEpochChecked(*loader, 0, [&](int64_t k) {
    if (k == 3) a.reset();  // A goes away
    if (k == 6) {
      // And comes back; the trainer waits until the loader is there again
      // (its backoff, gRPC's reconnection).
      a = std::make_unique<RunningServer>(*dataset_, address_a);
      const absl::Time give_up = absl::Now() + absl::Seconds(30);
      while (absl::Now() < give_up) {
        absl::StatusOr<ServerStatus> status = FetchServerStatus(address_a, absl::Seconds(5));
        if (status.ok() && status->active_streams > 0) break;
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

TEST_F(DataServerTest, ASlowTrainerIsNotAStall) {
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
    if (!batch->has_value()) break;
    if (++delivered <= 2) absl::SleepFor(absl::Milliseconds(800));  // a long training step
  }
  EXPECT_EQ(delivered, 9);
}

TEST_F(DataServerTest, DatasetMismatchNamesBothServers) {
  RunningServer a(*dataset_);
  RunningServer other(testing::MakeImageFolder("server_other", 2, 5).string());
  auto loader = RemoteLoader::Connect(LoaderOptions({a.address(), other.address()}, 0, 1));
  ASSERT_FALSE(loader.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(loader.status()));
  EXPECT_NE(loader.status().message().find(a.address()), std::string::npos) << loader.status();
  EXPECT_NE(loader.status().message().find(other.address()), std::string::npos);
}

TEST_F(DataServerTest, UnreachableServersAreNamed) {
  RemoteLoaderOptions options = LoaderOptions({"127.0.0.1:1"}, 0, 1);
  options.connect_timeout = absl::Milliseconds(300);
  auto loader = RemoteLoader::Connect(options);
  ASSERT_FALSE(loader.ok());
  EXPECT_NE(loader.status().message().find("127.0.0.1:1"), std::string::npos) << loader.status();
}

// Raw requests that a well-behaved loader never sends.
class RawStreamTest : public DataServerTest {
 protected:
  grpc::Status Exchange(const std::vector<v1::BatchRequest>& requests) {
    auto stub = v1::DataService::NewStub(
        grpc::CreateChannel(server_.address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    auto stream = stub->StreamBatches(&context);
    for (const v1::BatchRequest& request : requests) stream->Write(request);
    stream->WritesDone();
    v1::Batch batch;
    while (stream->Read(&batch)) {
    }
    return stream->Finish();
  }
  v1::BatchRequest Open(uint64_t fingerprint, uint32_t batch_size = 4,
                        const std::string& pipeline = "") {
    v1::BatchRequest request;
    request.mutable_open()->set_dataset_fingerprint(fingerprint);
    request.mutable_open()->set_batch_size(batch_size);
    request.mutable_open()->set_world_size(2);
    request.mutable_open()->set_pipeline(pipeline);
    return request;
  }
  v1::BatchRequest Ask(uint32_t rank, uint32_t index) {
    v1::BatchRequest request;
    request.mutable_batch()->set_rank(rank);
    request.mutable_batch()->set_index(index);
    return request;
  }
  uint64_t fingerprint() { return Dataset::Open(*dataset_)->fingerprint(); }

  RunningServer server_{*dataset_};
};

TEST_F(RawStreamTest, ValidRequestsSucceed) {
  EXPECT_TRUE(Exchange({Open(fingerprint()), Ask(1, 7)}).ok());
  // Work for the vanished clients is accounted for and released.
  absl::StatusOr<ServerStatus> status;
  for (int wait = 0; wait < 100; ++wait) {
    status = FetchServerStatus(server_.address(), absl::Seconds(5));
    ASSERT_TRUE(status.ok()) << status.status();
    if (status->batches_in_flight == 0 && status->active_streams == 0) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(status->batches_in_flight, 0u);
  EXPECT_EQ(status->active_streams, 0u);
}

TEST_F(RawStreamTest, MalformedRequestsGetInvalidArgument) {
  EXPECT_EQ(Exchange({Ask(0, 0)}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Exchange({v1::BatchRequest()}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Exchange({Open(fingerprint()), Ask(2, 0)}).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Exchange({Open(fingerprint()), Ask(0, 8)}).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Exchange({Open(fingerprint(), 0)}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Exchange({Open(fingerprint(), 100000)}).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Exchange({Open(fingerprint(), 4, "blur(3)")}).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Exchange({Open(fingerprint()), Open(fingerprint())}).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(RawStreamTest, BytesThatAreNoRequestGetInvalidArgument) {
  grpc::GenericStub stub(
      grpc::CreateChannel(server_.address(), grpc::InsecureChannelCredentials()));
  // A length-delimited field whose length runs past the end, and a bare
  // truncated varint.
  for (const std::string& garbage : {std::string("\x0a\x7f\x01\x02", 4), std::string("\x08\xff")}) {
    grpc::ClientContext context;
    ByteStream stream(stub, &context, "/heterodl.v1.DataService/StreamBatches");
    grpc::Slice slice(garbage);
    stream.Send(grpc::ByteBuffer(&slice, 1));
    stream.WritesDone();
    grpc::ByteBuffer ignored;
    while (stream.Read(&ignored)) {
    }
    const grpc::Status status = stream.Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(status.error_message().find("malformed BatchRequest"), std::string::npos);
  }
  EXPECT_TRUE(Exchange({Open(fingerprint()), Ask(1, 7)}).ok());
}

TEST_F(DataServerTest, StreamsAndTheMemoryOfAStreamAreBounded) {
  DataServerOptions options;
  options.dataset = *dataset_;
  options.pipeline = kPipeline;
  options.address = "127.0.0.1:0";
  options.threads = 2;
  options.max_streams = 2;
  // Three batches of 4 images of 256 x 256: each far more than HTTP/2's
  // first flow-control window, so a client that does not read holds the
  // server's writes (and the batches count as in flight) however fast they
  // are built.
  options.max_stream_bytes = 3 * 4 * 256 * 256 * 3;
  options.drain_timeout = absl::Milliseconds(200);
  absl::StatusOr<std::unique_ptr<DataServer>> server = DataServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = absl::StrCat("127.0.0.1:", (*server)->port());
  auto stub =
      v1::DataService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  const uint64_t fingerprint = Dataset::Open(*dataset_)->fingerprint();
  v1::BatchRequest open;
  open.mutable_open()->set_dataset_fingerprint(fingerprint);
  open.mutable_open()->set_batch_size(4);
  open.mutable_open()->set_world_size(1);
  open.mutable_open()->set_pipeline("resize(256)|center_crop(256)");
  auto ask = [](uint32_t index) {
    v1::BatchRequest request;
    request.mutable_batch()->set_index(index);
    return request;
  };

  v1::Batch batch;
  // Two streams, each known to the server (a batch came back on each)...
  grpc::ClientContext first_context, second_context;
  auto first = stub->StreamBatches(&first_context);
  auto second = stub->StreamBatches(&second_context);
  for (auto* stream : {first.get(), second.get()}) {
    ASSERT_TRUE(stream->Write(open));
    ASSERT_TRUE(stream->Write(ask(0)));
    ASSERT_TRUE(stream->Read(&batch));
  }
  // ...and a third is refused.
  grpc::ClientContext third_context;
  auto third = stub->StreamBatches(&third_context);
  third->Write(open);
  third->WritesDone();
  while (third->Read(&batch)) {
  }
  const grpc::Status refused = third->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.error_message().find("limit of 2 streams"), std::string::npos)
      << refused.error_message();
  for (auto* stream : {first.get(), second.get()}) {
    stream->WritesDone();
    EXPECT_TRUE(stream->Finish().ok());
  }

  // A client that asks and never reads: past three batches in flight it is
  // refused. It asks for the whole epoch (15 batches) at once, far faster
  // than batches are decoded and sent, then half-closes, so a server that
  // failed to refuse would end the stream (and fail below) rather than hang.
  grpc::ClientContext greedy_context;
  auto greedy = stub->StreamBatches(&greedy_context);
  ASSERT_TRUE(greedy->Write(open));
  for (uint32_t k = 0; k < 15; ++k) greedy->Write(ask(k));
  greedy->WritesDone();
  while (greedy->Read(&batch)) {
  }
  const grpc::Status greedy_status = greedy->Finish();
  EXPECT_EQ(greedy_status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << greedy_status.error_message();
  EXPECT_NE(greedy_status.error_message().find("memory limit"), std::string::npos);

  // An oversized request never reaches the service.
  grpc::ClientContext big_context;
  auto big = stub->StreamBatches(&big_context);
  v1::BatchRequest oversized = open;
  oversized.mutable_open()->set_pipeline(std::string(5 << 20, 'x'));
  big->Write(oversized);
  big->WritesDone();
  while (big->Read(&batch)) {
  }
  EXPECT_EQ(big->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  (*server)->RequestStop("test");
  EXPECT_TRUE((*server)->Wait().ok());
}

TEST_F(DataServerTest, SixtyFourConcurrentClients) {
  RunningServer server(*dataset_);
  std::vector<std::thread> clients;
  std::vector<int> samples(64, 0);
  std::vector<std::string> errors(64);
  for (int i = 0; i < 64; ++i) {
    clients.emplace_back([&, i] {
      RemoteLoaderOptions options = LoaderOptions({server.address()}, 0, 1);
      options.seed = static_cast<uint64_t>(i);
      options.connections_per_server = 1;
      absl::StatusOr<std::unique_ptr<RemoteLoader>> loader = RemoteLoader::Connect(options);
      if (!loader.ok()) {
        errors[i] = loader.status().ToString();
        return;
      }
      std::set<int64_t> seen;
      if (!(*loader)->SetEpoch(0).ok()) return;
      while (true) {
        absl::StatusOr<std::optional<Batch>> batch = (*loader)->Next();
        if (!batch.ok()) {
          errors[i] = batch.status().ToString();
          return;
        }
        if (!*batch) break;
        seen.insert((*batch)->indices.begin(), (*batch)->indices.end());
        samples[i] += static_cast<int>((*batch)->size());
      }
      if (static_cast<int>(seen.size()) != samples[i]) errors[i] = "a sample came twice";
    });
  }
  for (std::thread& client : clients) client.join();
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(errors[i], "") << "client " << i;
    EXPECT_EQ(samples[i], 60) << "client " << i;  // 3 classes x 20 images, each once
  }
}

TEST_F(RawStreamTest, ClientsThatVanishMidStreamLeaveTheServerHealthy) {
  auto stub = v1::DataService::NewStub(
      grpc::CreateChannel(server_.address(), grpc::InsecureChannelCredentials()));
  for (int attempt = 0; attempt < 20; ++attempt) {
    grpc::ClientContext context;
    auto stream = stub->StreamBatches(&context);
    stream->Write(Open(fingerprint()));
    for (uint32_t k = 0; k < 8; ++k) stream->Write(Ask(0, k));
    if (attempt % 2 == 1) {
      v1::Batch batch;
      stream->Read(&batch);  // leave with batches still being built and sent
    }
    context.TryCancel();
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  EXPECT_TRUE(Exchange({Open(fingerprint()), Ask(1, 7)}).ok());
}

TEST_F(RawStreamTest, WrongFingerprintIsFailedPrecondition) {
  grpc::Status status = Exchange({Open(fingerprint() ^ 1)});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(status.error_message().find("dataset mismatch"), std::string::npos);
}

TEST_F(DataServerTest, ServersLeaveOnTheirOwnWhenNoClientComesOrAllHaveGone) {
  for (const bool client_comes : {false, true}) {
    DataServerOptions options;
    options.dataset = *dataset_;
    options.pipeline = kPipeline;
    options.address = "127.0.0.1:0";
    options.threads = 1;
    options.startup_timeout = absl::Milliseconds(600);
    options.idle_timeout = absl::Milliseconds(300);
    absl::StatusOr<std::unique_ptr<DataServer>> server = DataServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    const std::string address = absl::StrCat("127.0.0.1:", (*server)->port());
    absl::Notification ended;
    std::thread waiter([&] {
      EXPECT_TRUE((*server)->Wait().ok());  // an orderly stop
      ended.Notify();
    });
    if (client_comes) {
      RemoteLoaderOptions loader_options = LoaderOptions({address}, 0, 1);
      auto loader = RemoteLoader::Connect(loader_options);
      ASSERT_TRUE(loader.ok());
      ReadEpoch(**loader, 0);
      // A trainer between epochs keeps its streams, and so the server.
      EXPECT_FALSE(ended.WaitForNotificationWithTimeout(absl::Milliseconds(800)));
    }
    // After the client leaves (or when none came), it exits by itself.
    EXPECT_TRUE(ended.WaitForNotificationWithTimeout(absl::Seconds(10))) << client_comes;
    waiter.join();
  }
}

TEST_F(DataServerTest, ATokenIsRequiredOfEveryCallWhenSet) {
  RunningServer server(*dataset_, "127.0.0.1:0", "s3cret");
  for (const std::string token : {"", "wrong"}) {
    RemoteLoaderOptions options = LoaderOptions({server.address()}, 0, 1);
    options.auth_token = token;
    options.connect_timeout = absl::Seconds(2);
    auto loader = RemoteLoader::Connect(options);
    ASSERT_FALSE(loader.ok());
    EXPECT_NE(loader.status().message().find("auth token"), std::string::npos) << loader.status();
    EXPECT_FALSE(FetchServerStatus(server.address(), absl::Seconds(2), token).ok());
    EXPECT_FALSE(
        ShutdownDataServers({server.address()}, "no", absl::Milliseconds(300), token).ok());
  }
  // A raw stream without the token is refused before any work.
  auto stub = v1::DataService::NewStub(
      grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  auto stream = stub->StreamBatches(&context);
  stream->WritesDone();
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);

  RemoteLoaderOptions options = LoaderOptions({server.address()}, 0, 1);
  options.auth_token = "s3cret";
  auto loader = RemoteLoader::Connect(options);
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ(ReadEpoch(**loader, 0).size(), 9u);
  EXPECT_TRUE(FetchServerStatus(server.address(), absl::Seconds(2), "s3cret").ok());
  EXPECT_TRUE(ShutdownDataServers({server.address()}, "done", absl::Seconds(5), "s3cret").ok());
  server.Join();
}

TEST_F(DataServerTest, ShutdownRpcStopsTheServer) {
  RunningServer server(*dataset_);
  EXPECT_TRUE(ShutdownDataServers({server.address()}, "test over", absl::Seconds(5)).ok());
  server.Join();  // returns only because the server stopped
  absl::Status again = ShutdownDataServers({server.address()}, "again", absl::Milliseconds(300));
  EXPECT_FALSE(again.ok());
  EXPECT_NE(again.message().find(server.address()), std::string::npos);
}

// Forwards TCP connections from 127.0.0.2:port() to a target port on
// 127.0.0.1, byte for byte: a server reached through it has its gRPC service
// at 127.0.0.2 but nothing else there, as behind a firewall that opens only
// the service's port.
class TcpForwarder {
 public:
  explicit TcpForwarder(int target_port) : target_port_(target_port) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address = Loopback(2, 0);
    socklen_t length = sizeof(address);
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&address), length), 0);
    EXPECT_EQ(::listen(listener_, 16), 0);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  ~TcpForwarder() {
    ::shutdown(listener_, SHUT_RDWR);
    acceptor_.join();
    ::close(listener_);
    {
      absl::MutexLock lock(&mu_);
      for (int fd : sockets_) ::shutdown(fd, SHUT_RDWR);
    }
    for (std::thread& pump : pumps_) pump.join();
    for (int fd : sockets_) ::close(fd);
  }
  std::string address() const { return absl::StrCat("127.0.0.2:", port_); }

 private:
  static sockaddr_in Loopback(int last_byte, int port) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(0x7f000000 | last_byte);
    return address;
  }
  void AcceptLoop() {
    while (true) {
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) return;
      const int server = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in target = Loopback(1, target_port_);
      if (::connect(server, reinterpret_cast<sockaddr*>(&target), sizeof(target)) != 0) {
        ::close(client);
        ::close(server);
        continue;
      }
      absl::MutexLock lock(&mu_);
      sockets_.insert(sockets_.end(), {client, server});
      pumps_.emplace_back([client, server] { Pump(client, server); });
      pumps_.emplace_back([client, server] { Pump(server, client); });
    }
  }
  static void Pump(int from, int to) {
    char buffer[1 << 16];
    while (true) {
      const ssize_t n = ::recv(from, buffer, sizeof(buffer), 0);
      if (n <= 0 || ::send(to, buffer, static_cast<size_t>(n), MSG_NOSIGNAL) != n) break;
    }
    ::shutdown(to, SHUT_WR);
  }

  const int target_port_;
  int listener_ = -1;
  int port_ = 0;
  std::thread acceptor_;
  absl::Mutex mu_;
  std::vector<int> sockets_;  // guarded by mu_ until the acceptor is joined
  std::vector<std::thread> pumps_;
};

int PortOf(const std::string& address) { return std::stoi(address.substr(address.rfind(':') + 1)); }

// Reads one batch, then returns the server's count of pixel channel streams
// (the loader's streams are open then).
// The batches of an epoch of the 60-sample test dataset for one rank hold
// every sample exactly once.
void ExpectEverySampleOnce(const std::vector<Batch>& batches) {
  std::multiset<int64_t> seen;
  for (const Batch& batch : batches) seen.insert(batch.indices.begin(), batch.indices.end());
  EXPECT_EQ(seen.size(), 60u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 60u);
}

// The server's count of open streams with a pixel channel once `loader` has
// read a batch, polled until it is `expected` (streams open and close on
// their own threads) or 10 s have passed.
uint32_t PixelChannelStreamsWhileReading(RemoteLoader& loader, const std::string& server,
                                         uint32_t expected) {
  EXPECT_TRUE(loader.SetEpoch(0).ok());
  absl::StatusOr<std::optional<Batch>> batch = loader.Next();
  EXPECT_TRUE(batch.ok() && batch->has_value());
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (true) {
    absl::StatusOr<ServerStatus> status = FetchServerStatus(server, absl::Seconds(5));
    EXPECT_TRUE(status.ok()) << status.status();
    if (!status.ok()) return 0;
    if (status->pixel_channel_streams == expected || absl::Now() > give_up) {
      return status->pixel_channel_streams;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

TEST_F(DataServerTest, PixelChannelsAndGrpcCarryTheSameBatches) {
  RunningServer server(*dataset_);
  RemoteLoaderOptions options = LoaderOptions({server.address()}, 1, 2);
  auto with_channel = RemoteLoader::Connect(options);
  options.pixel_channel = false;
  auto grpc_only = RemoteLoader::Connect(options);
  ASSERT_TRUE(with_channel.ok() && grpc_only.ok());
  // Each of the loader's two connections has its channel; gRPC only has none.
  EXPECT_EQ(PixelChannelStreamsWhileReading(**with_channel, server.address(), 2), 2u);
  EXPECT_EQ(PixelChannelStreamsWhileReading(**grpc_only, server.address(), 2), 2u);
  with_channel->reset();
  EXPECT_EQ(PixelChannelStreamsWhileReading(**grpc_only, server.address(), 0), 0u);

  with_channel = RemoteLoader::Connect(LoaderOptions({server.address()}, 1, 2));
  ASSERT_TRUE(with_channel.ok());
  const std::vector<Batch> a = ReadEpoch(**with_channel, 3);
  const std::vector<Batch> b = ReadEpoch(**grpc_only, 3);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].indices, b[k].indices);
    EXPECT_EQ(a[k].labels, b[k].labels);
    EXPECT_EQ(a[k].images.view(), b[k].images.view()) << "batch " << k;
  }
}

TEST_F(DataServerTest, AServerWithoutPixelChannelsServesThroughGrpc) {
  RunningServer server(*dataset_, "127.0.0.1:0", "", /*pixel_port=*/-1);
  auto loader = RemoteLoader::Connect(LoaderOptions({server.address()}, 0, 1));
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ(PixelChannelStreamsWhileReading(**loader, server.address(), 0), 0u);
  ExpectEverySampleOnce(ReadEpoch(**loader, 1));
}

TEST_F(DataServerTest, AnUnreachablePixelPortFallsBackToGrpc) {
  RunningServer server(*dataset_);
  TcpForwarder forwarder(PortOf(server.address()));
  // Through the forwarder the service answers, but the pixel port (bound on
  // 127.0.0.1) refuses: the loader warns and carries the pixels in gRPC.
  auto loader = RemoteLoader::Connect(LoaderOptions({forwarder.address()}, 0, 1));
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ(PixelChannelStreamsWhileReading(**loader, server.address(), 0), 0u);
  ExpectEverySampleOnce(ReadEpoch(**loader, 1));
}

TEST_F(RawStreamTest, ATicketWithoutItsConnectionEndsTheStream) {
  // A client that names a pixel channel and never connects it: the server
  // gives up on the channel after its attach timeout (10 s) and ends the
  // stream rather than holding the batch forever.
  auto stub = v1::DataService::NewStub(
      grpc::CreateChannel(server_.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  auto stream = stub->StreamBatches(&context);
  v1::BatchRequest open = Open(fingerprint());
  open.set_pixel_ticket(PixelTicketBytes(NewPixelTicket()));
  ASSERT_TRUE(stream->Write(open));
  ASSERT_TRUE(stream->Write(Ask(0, 0)));
  v1::Batch header;
  ASSERT_TRUE(stream->Read(&header));  // the header comes; the pixels cannot
  EXPECT_GT(header.images_on_channel(), 0u);
  EXPECT_TRUE(header.images().empty());
  EXPECT_FALSE(stream->Read(&header));
  const grpc::Status status = stream->Finish();
  EXPECT_NE(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
  EXPECT_FALSE(status.ok());
  // A ticket of the wrong length is refused.
  v1::BatchRequest bad = Open(fingerprint());
  bad.set_pixel_ticket("short");
  EXPECT_EQ(Exchange({bad}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace heterodl
