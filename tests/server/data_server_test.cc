// The data server as a client sees it, in-process on loopback: requests a
// well-behaved loader never sends, its limits, its tokens and how it stops.
#include "src/server/data_server.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"
#include "heterodl/data_service.grpc.pb.h"
#include "src/client/remote_loader.h"
#include "src/client/server_status.h"
#include "src/client/shutdown.h"
#include "src/common/net/tcp_address.h"
#include "src/data/dataset.h"
#include "src/rpc/byte_stream.h"
#include "src/wire/pixel_channel.h"
#include "tests/testing/served_dataset.h"
#include "tests/testing/status_testing.h"
#include "tests/testing/test_images.h"

namespace heterodl {
namespace {

using testing::kTestPipeline;
using testing::RunningServer;

class DataServerTest : public testing::ServedDatasetTest {};

// Polls the server at `address` until it has `streams` streams open, for up
// to 10 s; false if it never had.
bool AwaitActiveStreams(const std::string& address, uint32_t streams) {
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (absl::Now() < give_up) {
    absl::StatusOr<v1::ServerStats> status = FetchServerStatus(address, absl::Seconds(5));
    if (status.ok() && status->active_streams() == streams) {
      return true;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

// Polls the server at `address` for up to 20 s until `done` holds of its
// stats; the last stats fetched (an error if none could be).
absl::StatusOr<v1::ServerStats> AwaitStats(
    const std::string& address, const std::function<bool(const v1::ServerStats&)>& done) {
  absl::StatusOr<v1::ServerStats> stats;
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  do {
    stats = FetchServerStatus(address, absl::Seconds(5));
    if (stats.ok() && done(*stats)) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  } while (absl::Now() < give_up);
  return stats;
}

TEST_F(DataServerTest, AServerThatCannotStartFailsTheTestWithItsReason) {
  EXPECT_NONFATAL_FAILURE(RunningServer("/no/such/dataset"), "/no/such/dataset");
}

// Raw requests that a well-behaved loader never sends.
class RawStreamTest : public DataServerTest {
 protected:
  grpc::Status Exchange(const std::vector<v1::BatchRequest>& requests) {
    auto stub = v1::DataService::NewStub(
        grpc::CreateChannel(server_.address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    auto stream = stub->StreamBatches(&context);
    for (const v1::BatchRequest& request : requests) {
      stream->Write(request);
    }
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
  absl::StatusOr<v1::ServerStats> status;
  for (int wait = 0; wait < 100; ++wait) {
    status = FetchServerStatus(server_.address(), absl::Seconds(5));
    ASSERT_TRUE(status.ok()) << status.status();
    if (status->batches_in_flight() == 0 && status->active_streams() == 0) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(status->batches_in_flight(), 0u);
  EXPECT_EQ(status->active_streams(), 0u);
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
  options.pipeline = kTestPipeline;
  options.address = "127.0.0.1:0";
  options.threads = 2;
  options.streams.max_streams = 2;
  options.streams.max_streams_per_host = 2;  // all of them from loopback
  // Three batches of 4 images of 256 x 256: each far more than HTTP/2's
  // first flow-control window, so a client that does not read holds the
  // server's writes (and the batches count as in flight) however fast they
  // are built.
  options.streams.max_stream_bytes = uint64_t{3} * 4 * 256 * 256 * 3;
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
  // A stream's status reaches the client before the server has let go of
  // the stream: wait until it has, or the next one would still be one too
  // many.
  ASSERT_TRUE(AwaitActiveStreams(address, 0));

  // A client that asks and never reads: past three batches in flight it is
  // refused. It asks for the whole epoch (15 batches) at once, far faster
  // than batches are decoded and sent, then half-closes, so a server that
  // failed to refuse would end the stream (and fail below) rather than hang.
  grpc::ClientContext greedy_context;
  auto greedy = stub->StreamBatches(&greedy_context);
  ASSERT_TRUE(greedy->Write(open));
  for (uint32_t k = 0; k < 15; ++k) {
    greedy->Write(ask(k));
  }
  greedy->WritesDone();
  while (greedy->Read(&batch)) {
  }
  const grpc::Status greedy_status = greedy->Finish();
  EXPECT_EQ(greedy_status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << greedy_status.error_message();
  EXPECT_NE(greedy_status.error_message().find("memory limit"), std::string::npos)
      << greedy_status.error_message();

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
  clients.reserve(64);
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
      if (!(*loader)->SetEpoch(0).ok()) {
        return;
      }
      while (true) {
        absl::StatusOr<std::optional<Batch>> batch = (*loader)->Next();
        if (!batch.ok()) {
          errors[i] = batch.status().ToString();
          return;
        }
        if (!*batch) {
          break;
        }
        seen.insert((*batch)->indices.begin(), (*batch)->indices.end());
        samples[i] += static_cast<int>((*batch)->size());
      }
      if (static_cast<int>(seen.size()) != samples[i]) {
        errors[i] = "a sample came twice";
      }
    });
  }
  for (std::thread& client : clients) {
    client.join();
  }
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
    for (uint32_t k = 0; k < 8; ++k) {
      stream->Write(Ask(0, k));
    }
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
    options.pipeline = kTestPipeline;
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
  // Every refusal above is counted (the loader's first attempts, the status
  // and shutdown calls, the raw stream), and told in the server's status.
  absl::StatusOr<v1::ServerStats> status =
      FetchServerStatus(server.address(), absl::Seconds(2), "s3cret");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_GE(status->calls_refused_unauthenticated(), 7u);
  EXPECT_EQ(status->streams_refused_at_limit(), 0u);
  EXPECT_TRUE(ShutdownDataServers({server.address()}, "done", absl::Seconds(5), "s3cret").ok());
  server.Join();
}

TEST_F(DataServerTest, CallsThatNeverOpenHoldNoSlotAndEndAfterTheOpenTimeout) {
  DataServerOptions options = RunningServer::Options(*dataset_);
  options.streams.max_streams = 2;
  options.streams.open_timeout = absl::Seconds(1);
  RunningServer server(options);
  auto stub = v1::DataService::NewStub(
      grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
  // More bare calls than there are stream slots, and than may wait to open
  // (4 x max_streams): the oldest make room for the newer.
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReaderWriter<v1::BatchRequest, v1::Batch>>> bare;
  for (int i = 0; i < 9; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    bare.push_back(stub->StreamBatches(contexts.back().get()));
  }
  // A loader still gets both slots and reads its epoch.
  {
    RemoteLoaderOptions loader_options = LoaderOptions({server.address()}, 0, 1);
    absl::StatusOr<std::unique_ptr<RemoteLoader>> loader = RemoteLoader::Connect(loader_options);
    ASSERT_TRUE(loader.ok()) << loader.status();
    EXPECT_EQ(ReadEpoch(**loader, 0).size(), 9u);
  }
  // Every bare call ends, made room for or after the open timeout, not at
  // the client's 60 s deadline.
  int timed_out = 0;
  for (auto& call : bare) {
    v1::Batch batch;
    while (call->Read(&batch)) {
    }
    const grpc::Status status = call->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
    EXPECT_NE(status.error_message().find("no open request"), std::string::npos)
        << status.error_message();
    timed_out += status.error_message().find("within 1s") != std::string::npos;
  }
  // The oldest ones made room for the loader's calls at least.
  EXPECT_LT(timed_out, 9);
}

TEST_F(DataServerTest, AStreamThatNeverReadsIsEndedWhileOthersWaitForMemory) {
  DataServerOptions options = RunningServer::Options(*dataset_);
  // Batches of 8 x 512 x 512 (6 MiB) go to the hostile stream: more than
  // loopback's socket buffers and HTTP/2's windows take, so what it does
  // not read stays in the server. Three of them fill the budget.
  constexpr uint64_t kHostileBatchBytes = uint64_t{8} * 512 * 512 * 3;
  options.requests.memory_budget_bytes = 3 * kHostileBatchBytes;
  options.streams.unread_timeout = absl::Seconds(1);
  RunningServer server(options);
  auto stub = v1::DataService::NewStub(
      grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext hostile_context;
  auto hostile = stub->StreamBatches(&hostile_context);
  v1::BatchRequest open;
  open.mutable_open()->set_dataset_fingerprint(Dataset::Open(*dataset_)->fingerprint());
  open.mutable_open()->set_batch_size(8);
  open.mutable_open()->set_world_size(1);
  open.mutable_open()->set_pipeline("resize(512)|center_crop(512)");
  ASSERT_TRUE(hostile->Write(open));
  for (uint32_t k = 0; k < 7; ++k) {
    v1::BatchRequest ask;
    ask.mutable_batch()->set_index(k);
    ASSERT_TRUE(hostile->Write(ask));
  }
  // It asks, and never reads: the budget fills with its batches.
  ASSERT_OK_AND_ASSIGN(v1::ServerStats full,
                       AwaitStats(server.address(), [](const v1::ServerStats& stats) {
                         return stats.memory_reserved_bytes() == stats.memory_budget_bytes();
                       }));
  EXPECT_EQ(full.memory_reserved_bytes(), 3 * kHostileBatchBytes);

  // A loader still reads its epoch: its batches wait for memory, and the
  // stream that holds it unread is ended for them.
  {
    absl::StatusOr<std::unique_ptr<RemoteLoader>> loader =
        RemoteLoader::Connect(LoaderOptions({server.address()}, 0, 1));
    ASSERT_TRUE(loader.ok()) << loader.status();
    EXPECT_EQ(ReadEpoch(**loader, 0).size(), 9u);
  }
  v1::Batch batch;
  while (hostile->Read(&batch)) {
  }
  EXPECT_FALSE(hostile->Finish().ok());
  ASSERT_OK_AND_ASSIGN(const v1::ServerStats after,
                       AwaitStats(server.address(), [](const v1::ServerStats& stats) {
                         return stats.memory_reserved_bytes() == 0;
                       }));
  EXPECT_EQ(after.streams_ended_unread(), 1u);
  EXPECT_GE(after.batches_waited_for_memory(), 1u);
  EXPECT_LE(after.memory_peak_reserved_bytes(), after.memory_budget_bytes());
  EXPECT_EQ(after.memory_reserved_bytes(), 0u);
}

TEST_F(DataServerTest, OneHostCannotHoldEveryStream) {
  // The greedy client comes from ::1, the loader from 127.0.0.1: two hosts,
  // as far as a server listening on both can tell (on loopback every IPv4
  // connection comes from 127.0.0.1, whatever address it dials).
  if (!ProbeTcpBind("::1", 0).ok()) {
    GTEST_SKIP() << "no IPv6 loopback here: " << ProbeTcpBind("::1", 0);
  }
  DataServerOptions options = RunningServer::Options(*dataset_, "[::]:0");
  options.streams.max_streams = 4;
  options.streams.max_streams_per_host = 2;
  RunningServer server(options);
  const std::string port = server.address().substr(server.address().rfind(':') + 1);
  auto stub = v1::DataService::NewStub(
      grpc::CreateChannel("[::1]:" + port, grpc::InsecureChannelCredentials()));
  v1::BatchRequest open;
  open.mutable_open()->set_dataset_fingerprint(Dataset::Open(*dataset_)->fingerprint());
  open.mutable_open()->set_batch_size(4);
  open.mutable_open()->set_world_size(1);
  v1::BatchRequest ask;
  ask.mutable_batch()->set_index(0);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReaderWriter<v1::BatchRequest, v1::Batch>>> streams;
  v1::Batch batch;
  for (int i = 0; i < 3; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    streams.push_back(stub->StreamBatches(contexts.back().get()));
    streams.back()->Write(open);
    streams.back()->Write(ask);
    if (i < 2) {
      ASSERT_TRUE(streams.back()->Read(&batch)) << "stream " << i;  // open, and served
    }
  }
  streams.back()->WritesDone();
  while (streams.back()->Read(&batch)) {
  }
  const grpc::Status refused = streams.back()->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.error_message().find("your host (ipv6:[::1]) has its share of 2 streams"),
            std::string::npos)
      << refused.error_message();
  // The slots it may not take are another host's.
  {
    absl::StatusOr<std::unique_ptr<RemoteLoader>> loader =
        RemoteLoader::Connect(LoaderOptions({"127.0.0.1:" + port}, 0, 1));
    ASSERT_TRUE(loader.ok()) << loader.status();
    EXPECT_EQ(ReadEpoch(**loader, 0).size(), 9u);
  }
  absl::StatusOr<v1::ServerStats> stats = FetchServerStatus("127.0.0.1:" + port, absl::Seconds(5));
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->streams_refused_per_host(), 1u);
  for (int i = 0; i < 2; ++i) {
    streams[i]->WritesDone();
    while (streams[i]->Read(&batch)) {
    }
    EXPECT_TRUE(streams[i]->Finish().ok());
  }
}

TEST_F(DataServerTest, ASegmentationServerDeclaresItsMasksAndRefusesAnIgnoreIndexTheyCannotHold) {
  const std::filesystem::path root =
      testing::MakePaintedSegmentationFolder("declared-masks", 4, 2, /*sixteen_bit=*/true);
  DataServerOptions options = RunningServer::Options(root.string());
  options.pipeline = "resize(24x40)";
  options.decoding.mask_ignore_index = 70000;  // over 16 bits
  absl::Status status = DataServer::Start(options).status();
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_NE(status.message().find("--ignore-index 70000"), std::string::npos) << status;
  options.decoding.mask_ignore_index = 65535;
  RunningServer server(options);
  absl::StatusOr<std::unique_ptr<RemoteLoader>> loader =
      RemoteLoader::Connect(LoaderOptions({server.address()}, 0, 1));
  ASSERT_TRUE(loader.ok()) << loader.status();
  const std::vector<Batch> batches = ReadEpoch(**loader, 0);
  ASSERT_EQ(batches.size(), 1u);
  ASSERT_EQ(batches[0].fields.size(), 2u);
  EXPECT_EQ(batches[0].fields[1].name, "masks");
  EXPECT_EQ(batches[0].fields[1].dtype, ElementType::kInt32);
  EXPECT_EQ(batches[0].fields[1].shape, (std::vector<int64_t>{4, 24, 40}));
  const absl::StatusOr<absl::Span<const int32_t>> masks = batches[0].View<int32_t>("masks");
  ASSERT_TRUE(masks.ok()) << masks.status();
  for (const int32_t id : *masks) {
    ASSERT_EQ(id % testing::kSixteenBitIdScale, 0) << id;
  }
}

TEST_F(DataServerTest, ShutdownRpcStopsTheServer) {
  RunningServer server(*dataset_);
  EXPECT_TRUE(ShutdownDataServers({server.address()}, "test over", absl::Seconds(5)).ok());
  server.Join();  // returns only because the server stopped
  // Gone: its port refuses connections, so there is nothing left to stop
  // (the leader does not wait out its deadline for a server a signal ended).
  EXPECT_OK(ShutdownDataServers({server.address()}, "again", absl::Seconds(30)));
  // A name that never resolves is not "gone": it fails, naming the server.
  absl::Status unknown = ShutdownDataServers({"nohost.invalid:5"}, "x", absl::Milliseconds(300));
  EXPECT_FALSE(unknown.ok());
  EXPECT_NE(unknown.message().find("nohost.invalid:5"), std::string::npos);
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
