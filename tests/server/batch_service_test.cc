#include "src/server/batch_service.h"

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "augment/pipeline.h"
#include "gtest/gtest.h"
#include "src/data/dataset.h"
#include "src/data/native_sources.h"
#include "src/plan/epoch_plan.h"
#include "src/wire/batch_layout.h"
#include "src/wire/plan_config.h"
#include "tests/testing/status_testing.h"
#include "tests/testing/test_images.h"

namespace heterodl {
namespace {

constexpr char kPipeline[] = "resize(40)|center_crop(32)";

// What one BuildAsync handed to its `done`, waited for.
class BuildResult {
 public:
  std::function<void(absl::StatusOr<BuiltBatch>)> Callback() {
    return [this](absl::StatusOr<BuiltBatch> batch) {
      absl::MutexLock lock(&mu_);
      ++calls_;
      result_ = std::move(batch);
    };
  }
  // Waits up to 20 s for the callback; then it must have run exactly once.
  absl::StatusOr<BuiltBatch> Await() {
    absl::MutexLock lock(&mu_);
    auto called = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_ > 0; };
    mu_.AwaitWithTimeout(absl::Condition(&called), absl::Seconds(20));
    EXPECT_EQ(calls_, 1);
    if (!result_.has_value()) {
      return absl::DeadlineExceededError("done never ran");
    }
    return *result_;
  }

 private:
  absl::Mutex mu_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<absl::StatusOr<BuiltBatch>> result_ ABSL_GUARDED_BY(mu_);
};

class BatchServiceTest : public ::testing::Test {
 protected:
  // 2 classes x 10 JPEGs, and one file that is no image in class1.
  static void SetUpTestSuite() {
    folder_ = new std::string(testing::MakeImageFolder("batch_service", 2, 10).string());
    testing::WriteFile(std::filesystem::path(*folder_) / "class1" / "broken.jpg", "no jpeg");
  }

  static std::unique_ptr<BatchService> MakeService(int threads, RequestLimits limits = {}) {
    absl::StatusOr<Dataset> dataset = Dataset::Open(*folder_);
    absl::StatusOr<Pipeline> pipeline = Pipeline::Parse(kPipeline);
    EXPECT_TRUE(dataset.ok() && pipeline.ok());
    return std::make_unique<BatchService>(
        std::make_unique<NativeSources>(*std::move(dataset), *std::move(pipeline),
                                        PipelineOptions{}, limits.max_sample_pixel_operations),
        threads, limits);
  }
  static v1::PlanConfig Config(BatchService& service, uint32_t batch_size = 4,
                               uint32_t world_size = 2) {
    v1::PlanConfig config;
    config.set_dataset_fingerprint(service.Info()->fingerprint());
    config.set_seed(5);
    config.set_batch_size(batch_size);
    config.set_world_size(world_size);
    return config;
  }
  static v1::BatchId Id(uint32_t epoch, uint32_t rank, uint32_t index) {
    v1::BatchId id;
    id.set_epoch(epoch);
    id.set_rank(rank);
    id.set_index(index);
    return id;
  }
  static absl::StatusOr<BuiltBatch> Build(BatchService& service,
                                          const std::shared_ptr<const StreamPlan>& stream,
                                          const v1::BatchId& id) {
    BuildResult result;
    service.BuildAsync(stream, id, result.Callback());
    return result.Await();
  }

  static std::string* folder_;
};
std::string* BatchServiceTest::folder_ = nullptr;

TEST_F(BatchServiceTest, InfoDescribesTheDatasetAndTheDefaultPipeline) {
  std::unique_ptr<BatchService> service = MakeService(1);
  ASSERT_OK_AND_ASSIGN(const v1::DatasetInfo info, service->Info());
  EXPECT_EQ(info.num_samples(), 21u);
  EXPECT_EQ(info.class_names_size(), 2);
  EXPECT_EQ(info.height(), 32u);
  EXPECT_EQ(info.width(), 32u);
  EXPECT_NE(info.default_pipeline().find("center_crop"), std::string::npos);
  // Its batches, as the contract declares them: images alone.
  ASSERT_EQ(info.fields_size(), 1);
  EXPECT_EQ(info.fields(0).SerializeAsString(), ImagesField(32, 32).SerializeAsString());
}

TEST_F(BatchServiceTest, InfoGivesANamedPipelinesShapeOrWhyItDoesNotParse) {
  std::unique_ptr<BatchService> service = MakeService(1);
  ASSERT_OK_AND_ASSIGN(const v1::DatasetInfo info, service->Info("resize(20)|center_crop(16)"));
  EXPECT_EQ(info.height(), 16u);
  EXPECT_EQ(info.width(), 16u);
  const absl::Status bad = service->Info("center_crop(16)|hflp(0.5)").status();
  EXPECT_TRUE(absl::IsInvalidArgument(bad)) << bad;
  EXPECT_NE(bad.message().find("unknown operation 'hflp'"), std::string::npos) << bad;
}

TEST_F(BatchServiceTest, AStreamIsRefusedWhatItMayNotAsk) {
  RequestLimits limits;
  limits.max_batch_size = 16;
  limits.max_batch_bytes = uint64_t{8} * 32 * 32 * 3;
  std::unique_ptr<BatchService> service = MakeService(1, limits);
  ASSERT_OK(service->OpenStream(Config(*service)).status());

  v1::PlanConfig config = Config(*service);
  config.set_dataset_fingerprint(config.dataset_fingerprint() ^ 1);
  absl::Status status = service->OpenStream(config).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_NE(status.message().find("dataset mismatch"), std::string::npos) << status;

  for (const uint32_t batch_size : {0u, 17u}) {
    status = service->OpenStream(Config(*service, batch_size)).status();
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << batch_size << ": " << status;
  }
  // Within the batch size limit, over the byte limit.
  status = service->OpenStream(Config(*service, 9)).status();
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_NE(status.message().find("bytes"), std::string::npos) << status;

  status = service->OpenStream(Config(*service, 4, 0)).status();
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;

  config = Config(*service);
  config.set_pipeline("resize(40)|blur(3)");
  status = service->OpenStream(config).status();
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_NE(status.message().find("blur"), std::string::npos) << status;

  status = service->OpenStream(Config(*service), std::string(65, 'c')).status();
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
}

TEST_F(BatchServiceTest, NoSequenceOfPipelinesLocksALaterClientOut) {
  std::unique_ptr<BatchService> service = MakeService(1);
  v1::PlanConfig config = Config(*service);
  config.set_pipeline("resize(20)|center_crop(12)");
  ASSERT_OK_AND_ASSIGN(const std::shared_ptr<const StreamPlan> stream, service->OpenStream(config));
  // Far more distinct pipelines than the cache keeps, asked without a
  // stream (GetDatasetInfo) and with one: every one is served.
  for (int side = 8; side < 308; ++side) {
    EXPECT_OK(service->Info("center_crop(" + std::to_string(side) + ")").status());
  }
  config.set_pipeline("center_crop(9)|hflip(0.5)");
  EXPECT_OK(service->OpenStream(config).status());
  // The first stream's pipeline, pushed out of the cache, lives with it.
  ASSERT_OK_AND_ASSIGN(const BuiltBatch batch, Build(*service, stream, Id(0, 0, 0)));
  EXPECT_EQ(batch.header.height(), 12u);
  // A spec longer than any real one is refused before it is parsed.
  const std::string long_spec(kMaxPipelineSpecBytes + 1, ' ');
  const absl::Status refused = service->Info(long_spec).status();
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_NE(refused.message().find("over the limit of 16384"), std::string::npos) << refused;
}

TEST_F(BatchServiceTest, OnlyBatchesOfTheStreamsPlanAreValid) {
  std::unique_ptr<BatchService> service = MakeService(1);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const StreamPlan> stream,
                       service->OpenStream(Config(*service)));
  // 21 samples over 2 ranks: 11 per rank (padded), 3 batches of 4.
  EXPECT_OK(service->ValidateBatchId(*stream, Id(0, 1, 2)));
  EXPECT_TRUE(absl::IsInvalidArgument(service->ValidateBatchId(*stream, Id(0, 2, 0))));
  EXPECT_TRUE(absl::IsInvalidArgument(service->ValidateBatchId(*stream, Id(0, 0, 3))));
  EXPECT_TRUE(absl::IsInvalidArgument(service->ValidateBatchId(*stream, Id(kMaxEpoch + 1, 0, 0))));
}

TEST_F(BatchServiceTest, ABatchHoldsThePlansSamplesAndIsTheSameWhoeverBuildsIt) {
  std::unique_ptr<BatchService> one_thread = MakeService(1);
  std::unique_ptr<BatchService> three_threads = MakeService(3);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const StreamPlan> a,
                       one_thread->OpenStream(Config(*one_thread)));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const StreamPlan> b,
                       three_threads->OpenStream(Config(*three_threads)));
  ASSERT_OK_AND_ASSIGN(EpochPlan plan, EpochPlan::Create(a->params, 3));
  for (uint32_t index = 0; index < 3; ++index) {
    ASSERT_OK_AND_ASSIGN(BuiltBatch from_a, Build(*one_thread, a, Id(3, 1, index)));
    ASSERT_OK_AND_ASSIGN(BuiltBatch from_b, Build(*three_threads, b, Id(3, 1, index)));
    const std::vector<int64_t> planned = plan.BatchIndices(1, index);
    const v1::Batch& header = from_a.header;
    EXPECT_EQ(std::vector<int64_t>(header.indices().begin(), header.indices().end()), planned);
    EXPECT_EQ(header.labels_size(), static_cast<int>(planned.size()));
    EXPECT_EQ(header.height(), 32u);
    EXPECT_EQ(header.channels(), 3u);
    EXPECT_TRUE(header.images().empty());  // the pixels travel beside the header
    ASSERT_EQ(from_a.pixels.size, planned.size() * 32 * 32 * 3);
    ASSERT_EQ(from_b.pixels.size, from_a.pixels.size);
    EXPECT_EQ(std::memcmp(from_a.pixels.data, from_b.pixels.data, from_a.pixels.size), 0) << index;
    EXPECT_GE(header.queue_seconds(), 0);
    EXPECT_GT(header.build_seconds(), 0);
  }
  const v1::ServerStats stats = three_threads->Stats();
  EXPECT_EQ(stats.batches_sent(), 3u);
  EXPECT_EQ(stats.samples_sent(), 11u);
  EXPECT_EQ(stats.worker_threads(), 3u);
  EXPECT_GT(stats.decode_seconds(), 0);
}

TEST_F(BatchServiceTest, AMultiViewPipelineMakesAFieldPerGroupTheSameOnAnyServer) {
  constexpr char kViews[] =
      "2*random_resized_crop(24,scale=0.4:1)|hflip(0.5);3*random_resized_crop(12x16)|solarize(99)";
  std::unique_ptr<BatchService> one_thread = MakeService(1);
  std::unique_ptr<BatchService> three_threads = MakeService(3);
  ASSERT_OK_AND_ASSIGN(const v1::DatasetInfo info, one_thread->Info(kViews));
  ASSERT_EQ(info.fields_size(), 2);
  EXPECT_EQ(info.fields(0).name(), "views_0");
  EXPECT_EQ(std::vector<uint32_t>(info.fields(0).shape().begin(), info.fields(0).shape().end()),
            (std::vector<uint32_t>{2, 24, 24, 3}));
  EXPECT_EQ(info.fields(1).name(), "views_1");
  EXPECT_EQ(std::vector<uint32_t>(info.fields(1).shape().begin(), info.fields(1).shape().end()),
            (std::vector<uint32_t>{3, 12, 16, 3}));
  v1::PlanConfig config = Config(*one_thread, 7, 1);
  config.set_pipeline(kViews);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const StreamPlan> a, one_thread->OpenStream(config));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const StreamPlan> b, three_threads->OpenStream(config));
  ASSERT_OK_AND_ASSIGN(const Pipeline reference, Pipeline::Parse(kViews));
  ASSERT_OK_AND_ASSIGN(const Dataset dataset, Dataset::Open(*folder_));
  int failed = 0;
  for (uint32_t index = 0; index < 3; ++index) {
    ASSERT_OK_AND_ASSIGN(BuiltBatch from_a, Build(*one_thread, a, Id(1, 0, index)));
    ASSERT_OK_AND_ASSIGN(BuiltBatch from_b, Build(*three_threads, b, Id(1, 0, index)));
    const v1::Batch& header = from_a.header;
    ASSERT_OK_AND_ASSIGN(
        const BatchLayout layout,
        LayOutBatch(info.fields(), static_cast<uint32_t>(header.indices_size()),
                    header.ragged_lengths(), header.collated_shapes(), uint64_t{1} << 30));
    ASSERT_EQ(from_a.pixels.size, layout.payload_bytes);
    ASSERT_EQ(from_b.pixels.size, from_a.pixels.size);
    EXPECT_EQ(std::memcmp(from_a.pixels.data, from_b.pixels.data, from_a.pixels.size), 0);
    failed += static_cast<int>(header.failed());
    // Each sample's views are where its fields say, as the pipeline makes
    // them (a replaced sample's are its replacement's: not compared).
    for (int slot = 0; slot < header.indices_size(); ++slot) {
      const int64_t sample = header.indices(slot);
      if (dataset.sample(static_cast<size_t>(sample)).path.find("broken") != std::string::npos) {
        continue;
      }
      std::vector<uint8_t> globals(reference.view_groups()[0].bytes());
      std::vector<uint8_t> locals(reference.view_groups()[1].bytes());
      ASSERT_OK_AND_ASSIGN(const std::string bytes,
                           dataset.ReadSample(static_cast<size_t>(sample)));
      ASSERT_OK(reference.RunViews(bytes, {5, 1, static_cast<uint64_t>(sample)},
                                   {globals.data(), locals.data()}));
      EXPECT_EQ(std::memcmp(from_a.pixels.data + layout.fields[0].offset + slot * globals.size(),
                            globals.data(), globals.size()),
                0);
      EXPECT_EQ(std::memcmp(from_a.pixels.data + layout.fields[1].offset + slot * locals.size(),
                            locals.data(), locals.size()),
                0);
    }
  }
  EXPECT_EQ(failed, 1);  // the file that is no image, replaced with all its views
}

TEST_F(BatchServiceTest, AFileThatIsNoImageIsReplacedAndCounted) {
  std::unique_ptr<BatchService> service = MakeService(2);
  // One rank, one batch of the whole dataset: the broken file is in it.
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const StreamPlan> stream,
                       service->OpenStream(Config(*service, 21, 1)));
  ASSERT_OK_AND_ASSIGN(BuiltBatch batch, Build(*service, stream, Id(0, 0, 0)));
  EXPECT_EQ(batch.header.failed(), 1u);
  int replaced = 0;
  for (int status : batch.header.status()) {
    replaced += status == v1::SAMPLE_REPLACED;
  }
  EXPECT_EQ(replaced, 1);
  EXPECT_EQ(service->Stats().samples_failed(), 1u);
}

TEST_F(BatchServiceTest, ASequentialStreamServesTheDatasetInOrder) {
  std::unique_ptr<BatchService> service = MakeService(2);
  v1::PlanConfig config = Config(*service, 4, 1);
  config.set_sequential(true);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const StreamPlan> stream, service->OpenStream(config));
  ASSERT_OK_AND_ASSIGN(BuiltBatch batch, Build(*service, stream, Id(7, 0, 1)));
  EXPECT_EQ(std::vector<int64_t>(batch.header.indices().begin(), batch.header.indices().end()),
            (std::vector<int64_t>{4, 5, 6, 7}));
}

TEST_F(BatchServiceTest, BuildsNotStartedWhenTheStreamClosesAreCancelled) {
  std::unique_ptr<BatchService> service = MakeService(1);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const StreamPlan> stream,
                       service->OpenStream(Config(*service)));
  // The first build's `done` holds the only worker, so the next ones cannot
  // start before the stream closes.
  absl::Notification holding, release;
  service->BuildAsync(stream, Id(0, 0, 0), [&](const absl::StatusOr<BuiltBatch>& batch) {
    EXPECT_TRUE(batch.ok()) << batch.status();
    holding.Notify();
    release.WaitForNotification();
  });
  ASSERT_TRUE(holding.WaitForNotificationWithTimeout(absl::Seconds(20)));
  BuildResult queued;
  service->BuildAsync(stream, Id(0, 0, 1), queued.Callback());
  service->CloseStream(*stream);
  service->CloseStream(*stream);  // idempotent
  BuildResult after_close;
  service->BuildAsync(stream, Id(0, 0, 2), after_close.Callback());
  release.Notify();
  EXPECT_TRUE(absl::IsCancelled(queued.Await().status()));
  EXPECT_TRUE(absl::IsCancelled(after_close.Await().status()));
  // Another stream is served as before.
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const StreamPlan> other,
                       service->OpenStream(Config(*service)));
  EXPECT_OK(Build(*service, other, Id(0, 0, 1)).status());
}

TEST_F(BatchServiceTest, StreamsOfOneClientShareAQueueUntilTheLastCloses) {
  std::unique_ptr<BatchService> service = MakeService(1);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const StreamPlan> first,
                       service->OpenStream(Config(*service), "loader-a"));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const StreamPlan> second,
                       service->OpenStream(Config(*service), "loader-a"));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const StreamPlan> stranger,
                       service->OpenStream(Config(*service), "loader-b"));
  EXPECT_EQ(first->work_queue, second->work_queue);
  EXPECT_NE(first->work_queue, stranger->work_queue);
  // Closing one of the client's streams leaves the other's builds alone.
  service->CloseStream(*first);
  EXPECT_OK(Build(*service, second, Id(0, 1, 0)).status());
  EXPECT_TRUE(absl::IsCancelled(Build(*service, first, Id(0, 1, 0)).status()));
  service->CloseStream(*second);
  EXPECT_TRUE(absl::IsCancelled(Build(*service, second, Id(0, 1, 0)).status()));
  EXPECT_OK(Build(*service, stranger, Id(0, 1, 0)).status());
}

TEST_F(BatchServiceTest, APipelineOverTheCostLimitIsRefusedNamingItsCostliestOperation) {
  std::unique_ptr<BatchService> service = MakeService(1);
  const std::string attack =
      "resize(8192)|gaussian_blur(255,sigma=1000)|gaussian_blur(255,sigma=1000)|center_crop(32)";
  const absl::Status refused = service->Info(attack).status();
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  for (const char* part :
       {"pipeline too costly", "limit of 2000 million (serve --max-pipeline-cost)",
        "operation 2, gaussian_blur(255,sigma=1000:1000), on a 10922x8192 image"}) {
    EXPECT_NE(refused.message().find(part), std::string::npos) << part << " in " << refused;
  }
  v1::PlanConfig config = Config(*service);
  config.set_pipeline(attack);
  EXPECT_TRUE(absl::IsInvalidArgument(service->OpenStream(config).status()));
  EXPECT_EQ(service->Stats().pipelines_refused_costly(), 2u);
  // Cheaper ones pass; the limit is the server's to set.
  EXPECT_OK(service->Info("resize(1024)|gaussian_blur(31)|center_crop(512)").status());
  absl::StatusOr<Pipeline> standard = Pipeline::Parse(kPipeline);
  ASSERT_OK(standard.status());
  EXPECT_OK(CheckPipelineCost(*standard, 2e9));
  EXPECT_TRUE(absl::IsInvalidArgument(CheckPipelineCost(*standard, 1e5)));
}

TEST_F(BatchServiceTest, ABatchOfAnAbandonedStreamIsCancelledAndCountsForNothing) {
  std::unique_ptr<BatchService> service = MakeService(2);
  // Samples of about a tenth of a second each (a 2048-pixel image blurred):
  // the batch is seconds from finished when the stream closes, however
  // late this thread gets to close it.
  v1::PlanConfig config = Config(*service, 21, 1);
  config.set_pipeline("resize(2048)|gaussian_blur(61)|center_crop(32)");
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const StreamPlan> stream, service->OpenStream(config));
  BuildResult result;
  service->BuildAsync(stream, Id(0, 0, 0), result.Callback());
  // Before or after its first samples start, whichever comes: what is
  // built stops, what is not is dropped.
  service->CloseStream(*stream);
  EXPECT_TRUE(absl::IsCancelled(result.Await().status()));
  const v1::ServerStats stats = service->Stats();
  EXPECT_EQ(stats.batches_sent(), 0u);
  EXPECT_EQ(stats.samples_sent(), 0u);
  EXPECT_EQ(stats.samples_failed(), 0u);
}

TEST_F(BatchServiceTest, BatchesWaitForTheMemoryBudgetAndOneThatNeverFitsIsRefused) {
  constexpr uint64_t kBatchBytes = uint64_t{4} * 32 * 32 * 3;
  RequestLimits limits;
  limits.memory_budget_bytes = 2 * kBatchBytes;
  std::unique_ptr<BatchService> service = MakeService(2, limits);
  const absl::Status too_big = service->OpenStream(Config(*service, 9, 1)).status();
  EXPECT_TRUE(absl::IsResourceExhausted(too_big)) << too_big;
  EXPECT_NE(too_big.message().find("--max-memory-mb"), std::string::npos) << too_big;

  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const StreamPlan> stream,
                       service->OpenStream(Config(*service, 4, 1)));
  // Two batches held (their pixels not yet sent) take the whole budget.
  std::optional<absl::StatusOr<BuiltBatch>> first = Build(*service, stream, Id(0, 0, 0));
  ASSERT_OK(first->status());
  ASSERT_OK_AND_ASSIGN(BuiltBatch second, Build(*service, stream, Id(0, 0, 1)));
  BuildResult third;
  service->BuildAsync(stream, Id(0, 0, 2), third.Callback());
  v1::ServerStats stats = service->Stats();
  EXPECT_EQ(stats.memory_budget_bytes(), 2 * kBatchBytes);
  EXPECT_EQ(stats.memory_reserved_bytes(), 2 * kBatchBytes);
  EXPECT_EQ(stats.batches_waiting_for_memory(), 1u);
  // Sending the first makes room for the third.
  first.reset();
  ASSERT_OK(third.Await().status());
  stats = service->Stats();
  EXPECT_EQ(stats.batches_waiting_for_memory(), 0u);
  EXPECT_EQ(stats.batches_waited_for_memory(), 1u);
  EXPECT_EQ(stats.memory_peak_reserved_bytes(), 2 * kBatchBytes);

  // A build still waiting when its stream closes is cancelled.
  BuildResult fourth;
  service->BuildAsync(stream, Id(0, 0, 3), fourth.Callback());
  EXPECT_EQ(service->Stats().batches_waiting_for_memory(), 1u);
  service->CloseStream(*stream);
  EXPECT_TRUE(absl::IsCancelled(fourth.Await().status()));
  EXPECT_EQ(service->Stats().batches_waiting_for_memory(), 0u);
}

TEST_F(BatchServiceTest, ASyntheticDatasetsBatchesShareTheirPixels) {
  absl::StatusOr<Pipeline> pipeline = Pipeline::Parse(kPipeline);
  ASSERT_OK(pipeline.status());
  BatchService service(std::make_unique<NativeSources>(
                           Dataset::Synthetic(64, 4), *std::move(pipeline), PipelineOptions{}, 2e9),
                       2);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const StreamPlan> stream,
                       service.OpenStream(Config(service, 8, 1)));
  ASSERT_OK_AND_ASSIGN(BuiltBatch first, Build(service, stream, Id(0, 0, 0)));
  ASSERT_OK_AND_ASSIGN(BuiltBatch second, Build(service, stream, Id(0, 0, 1)));
  EXPECT_EQ(first.pixels.size, 8u * 32 * 32 * 3);
  EXPECT_EQ(first.pixels.data, second.pixels.data);
  EXPECT_EQ(first.header.labels_size(), 8);
  EXPECT_EQ(first.header.failed(), 0u);
}

// A source whose samples weigh `sample_bytes` (a Python dataset's fields say
// so), for the window a stream of it gets.
class WeighedSource : public BatchSource {
 public:
  explicit WeighedSource(uint32_t sample_bytes) {
    v1::FieldSpec* field = fields_.Add();
    field->set_name("blob");
    field->set_dtype(v1::DTYPE_UINT8);
    field->add_shape(sample_bytes);
  }
  const FieldSpecs& fields() const override { return fields_; }
  double ItemCost(uint32_t /*samples*/) const override { return 1; }
  void Describe(v1::DatasetInfo& /*info*/) const override {}
  absl::StatusOr<std::unique_ptr<SourceBatch>> Start(const BatchRequestSpec& /*request*/,
                                                     BatchPayload& /*payload*/) const override {
    return absl::UnimplementedError("not built");
  }

 private:
  FieldSpecs fields_;
};

TEST(StreamWindowTest, AStreamHoldsWhatItsOwnSourcesBatchesWeigh) {
  // 2 MB samples, batches of 4 under an 64 MB per-stream budget: 8 batches
  // (a 224x224 image's weight, as every Python stream was once sized, would
  // have given 106, and the stream 13 times the bytes it may hold).
  EXPECT_EQ(StreamWindow(WeighedSource(2 << 20), 4, uint64_t{64} << 20, 64), 8);
  // Tiny samples: as many as the stream may hold.
  EXPECT_EQ(StreamWindow(WeighedSource(16), 4, uint64_t{64} << 20, 64), 64);
  // One batch over the budget still goes: at least one in flight.
  EXPECT_EQ(StreamWindow(WeighedSource(64 << 20), 4, uint64_t{64} << 20, 64), 1);
}

}  // namespace
}  // namespace heterodl
