// The worker pool of a user's Python dataset (PythonDataset over
// PythonWorker), run with fake workers (fake_dataset_worker.cc) that fail
// on cue: each way a real worker goes wrong, without Python.
#include "src/data/python/python_dataset.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/memory/shared_regions.h"

namespace heterodl {
namespace {

using ::testing::HasSubstr;

// A fresh, empty folder of the test's own.
std::string TempFolder(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  std::string folder =
      absl::StrCat(root != nullptr ? root : "/tmp", "/python_dataset_", name, "_", ::getpid());
  (void)std::system(absl::StrCat("rm -rf '", folder, "'").c_str());
  ::mkdir(folder.c_str(), 0755);
  return folder;
}

class PythonDatasetTest : public ::testing::Test {
 protected:
  PythonDatasetOptions Options(const std::string& spec, int workers = 2) {
    PythonDatasetOptions options;
    options.worker.python = HETERODL_FAKE_DATASET_WORKER;
    options.worker.dataset = spec;
    options.worker.start_timeout = absl::Minutes(1);
    options.workers = workers;
    return options;
  }

  std::unique_ptr<PythonDataset> Start(const std::string& spec, int workers = 2) {
    absl::StatusOr<std::unique_ptr<PythonDataset>> dataset =
        PythonDataset::Start(Options(spec, workers), regions_);
    EXPECT_TRUE(dataset.ok()) << dataset.status();
    return dataset.ok() ? std::move(*dataset) : nullptr;
  }

  // A batch of `samples` rows of the dataset's fields in shared memory.
  struct Batch {
    BatchLayout layout;
    uint8_t* payload = nullptr;
  };
  Batch Allocate(const PythonDataset& dataset, uint32_t samples) {
    absl::StatusOr<BatchLayout> layout = LayOutBatch(dataset.fields(), samples, {}, {}, 1 << 20);
    EXPECT_TRUE(layout.ok()) << layout.status();
    void* memory = allocator_.allocate(layout->payload_bytes);
    allocated_.push_back(memory);
    return {*layout, static_cast<uint8_t*>(memory)};
  }

  // What the fake worker writes for sample `index`: 4 bytes of index % 251.
  static std::vector<uint8_t> Row(int64_t index) {
    return std::vector<uint8_t>(4, static_cast<uint8_t>(index % 251));
  }
  static std::vector<uint8_t> RowAt(const Batch& batch, size_t slot) {
    const uint8_t* row = batch.payload + batch.layout.fields[0].offset + slot * 4;
    return std::vector<uint8_t>(row, row + 4);
  }

  void TearDown() override {
    for (void* memory : allocated_) {
      allocator_.release(memory);
    }
  }

  std::shared_ptr<SharedRegions> regions_ = SharedRegions::Create();
  HostAllocator allocator_ = regions_->allocator();
  std::vector<void*> allocated_;
};

TEST_F(PythonDatasetTest, WorkersWriteEachSampleIntoItsRowOfTheBatch) {
  std::unique_ptr<PythonDataset> dataset = Start("samples=300");
  ASSERT_NE(dataset, nullptr);
  EXPECT_EQ(dataset->size(), 300u);
  ASSERT_EQ(dataset->fields().size(), 1);
  EXPECT_EQ(dataset->fields()[0].name(), "field_0");
  EXPECT_FALSE(dataset->labelled_images());
  EXPECT_FALSE(dataset->collates());

  const std::vector<int64_t> indices = {7, 0, 299, 260};
  Batch batch = Allocate(*dataset, static_cast<uint32_t>(indices.size()));
  // Slots made at once from several threads, as the service's pool does.
  std::vector<SlotResult> results(indices.size());
  std::vector<std::thread> threads;
  for (size_t slot = 0; slot < indices.size(); ++slot) {
    threads.emplace_back([&, slot] {
      results[slot] = dataset->BuildSlot(1, 0, indices, slot, batch.payload, batch.layout);
    });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
  for (size_t slot = 0; slot < indices.size(); ++slot) {
    EXPECT_EQ(results[slot].outcome, SampleOutcome::kOk) << results[slot].failure;
    EXPECT_EQ(results[slot].source, indices[slot]);
    EXPECT_EQ(RowAt(batch, slot), Row(indices[slot])) << "slot " << slot;
  }
  EXPECT_EQ(dataset->workers_replaced(), 0);
}

TEST_F(PythonDatasetTest, ASampleThatRaisesIsReplacedAndItsErrorKept) {
  std::unique_ptr<PythonDataset> dataset = Start("error_on=3");
  ASSERT_NE(dataset, nullptr);
  const std::vector<int64_t> indices = {3};
  Batch batch = Allocate(*dataset, 1);
  const SlotResult result = dataset->BuildSlot(5, 1, indices, 0, batch.payload, batch.layout);
  EXPECT_EQ(result.outcome, SampleOutcome::kReplaced);
  EXPECT_NE(result.source, 3);
  EXPECT_EQ(RowAt(batch, 0), Row(result.source));
  EXPECT_THAT(result.failure, HasSubstr("ValueError: sample 3 is broken"));
  // The user's error is not the worker's fault: it stays.
  EXPECT_EQ(dataset->workers_replaced(), 0);
}

TEST_F(PythonDatasetTest, AWorkerThatDiesIsReplacedAndTheSampleTriedAgain) {
  const std::string once = TempFolder("dies");
  std::unique_ptr<PythonDataset> dataset = Start(absl::StrCat("die_on=5,once_dir=", once));
  ASSERT_NE(dataset, nullptr);
  const std::vector<int64_t> indices = {5, 6};
  Batch batch = Allocate(*dataset, 2);
  const SlotResult result = dataset->BuildSlot(1, 0, indices, 0, batch.payload, batch.layout);
  EXPECT_EQ(result.outcome, SampleOutcome::kOk) << result.failure;
  EXPECT_EQ(RowAt(batch, 0), Row(5));
  EXPECT_EQ(dataset->workers_replaced(), 1);
  // The pool is whole again: both workers serve.
  for (size_t slot = 0; slot < 2; ++slot) {
    EXPECT_EQ(dataset->BuildSlot(1, 0, indices, slot, batch.payload, batch.layout).outcome,
              SampleOutcome::kOk);
  }
}

TEST_F(PythonDatasetTest, ASampleThatKillsEveryWorkerIsReplacedAfterTwo) {
  std::unique_ptr<PythonDataset> dataset = Start("die_on=5", 1);
  ASSERT_NE(dataset, nullptr);
  const std::vector<int64_t> indices = {5};
  Batch batch = Allocate(*dataset, 1);
  const SlotResult result = dataset->BuildSlot(1, 0, indices, 0, batch.payload, batch.layout);
  EXPECT_EQ(result.outcome, SampleOutcome::kReplaced);
  EXPECT_EQ(RowAt(batch, 0), Row(result.source));
  EXPECT_THAT(result.failure, HasSubstr("two Python workers in turn were lost"));
  EXPECT_EQ(dataset->workers_replaced(), 2);
}

TEST_F(PythonDatasetTest, AWorkerThatHangsPastTheSampleTimeoutIsReplaced) {
  const std::string once = TempFolder("hangs");
  PythonDatasetOptions options = Options(absl::StrCat("hang_on=2,once_dir=", once), 1);
  options.sample_timeout = absl::Seconds(2);
  absl::StatusOr<std::unique_ptr<PythonDataset>> dataset = PythonDataset::Start(options, regions_);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  const std::vector<int64_t> indices = {2};
  Batch batch = Allocate(**dataset, 1);
  const SlotResult result = (*dataset)->BuildSlot(1, 0, indices, 0, batch.payload, batch.layout);
  EXPECT_EQ(result.outcome, SampleOutcome::kOk) << result.failure;
  EXPECT_EQ(RowAt(batch, 0), Row(2));
  EXPECT_GE((*dataset)->workers_replaced(), 1);
}

TEST_F(PythonDatasetTest, AWorkerThatAnswersNonsenseIsReplaced) {
  const std::string once = TempFolder("garbles");
  std::unique_ptr<PythonDataset> dataset = Start(absl::StrCat("garble_on=4,once_dir=", once), 1);
  ASSERT_NE(dataset, nullptr);
  const std::vector<int64_t> indices = {4};
  Batch batch = Allocate(*dataset, 1);
  const SlotResult result = dataset->BuildSlot(1, 0, indices, 0, batch.payload, batch.layout);
  EXPECT_EQ(result.outcome, SampleOutcome::kOk) << result.failure;
  EXPECT_EQ(RowAt(batch, 0), Row(4));
  EXPECT_EQ(dataset->workers_replaced(), 1);
}

TEST_F(PythonDatasetTest, StopReleasesAThreadWhoseWorkerHangs) {
  const std::string once = TempFolder("stop");
  PythonDatasetOptions options = Options(absl::StrCat("hang_on=1,once_dir=", once), 1);
  options.sample_timeout = absl::Hours(1);
  absl::StatusOr<std::unique_ptr<PythonDataset>> dataset = PythonDataset::Start(options, regions_);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  const std::vector<int64_t> indices = {1};
  Batch batch = Allocate(**dataset, 1);
  SlotResult result;
  std::thread building(
      [&] { result = (*dataset)->BuildSlot(1, 0, indices, 0, batch.payload, batch.layout); });
  // The worker leaves its marker just before it hangs.
  const std::string marker = absl::StrCat(once, "/hang_on-1");
  struct stat about {};
  while (::stat(marker.c_str(), &about) != 0) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  (*dataset)->Stop();
  building.join();  // without Stop's kill: an hour
  EXPECT_EQ(result.outcome, SampleOutcome::kZeroFilled);
  EXPECT_EQ(RowAt(batch, 0), Row(0));
}

TEST_F(PythonDatasetTest, ARestartedWorkerThatDisagreesFailsItsSamplesNotTheServer) {
  const std::string folder = TempFolder("disagrees");
  const std::string length = absl::StrCat(folder, "/length");
  std::ofstream(length) << 16;
  std::unique_ptr<PythonDataset> dataset =
      Start(absl::StrCat("samples_from=", length, ",die_on=3,once_dir=", folder), 1);
  ASSERT_NE(dataset, nullptr);
  std::ofstream(length, std::ios::trunc) << 17;  // the dataset changed under the server
  const std::vector<int64_t> indices = {3};
  Batch batch = Allocate(*dataset, 1);
  const SlotResult result = dataset->BuildSlot(1, 0, indices, 0, batch.payload, batch.layout);
  EXPECT_EQ(result.outcome, SampleOutcome::kZeroFilled);
  EXPECT_THAT(result.failure, HasSubstr("made a different dataset"));
}

TEST_F(PythonDatasetTest, ALoadErrorIsTheUsersPythonError) {
  absl::StatusOr<std::unique_ptr<PythonDataset>> dataset = PythonDataset::Start(
      Options("load_error=ModuleNotFoundError: No module named 'mydata'"), regions_);
  ASSERT_FALSE(dataset.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(dataset.status())) << dataset.status();
  EXPECT_THAT(dataset.status().message(), HasSubstr("No module named 'mydata'"));
}

TEST_F(PythonDatasetTest, AWorkerThatEndsBeforeItsHelloSaysSo) {
  absl::StatusOr<std::unique_ptr<PythonDataset>> dataset =
      PythonDataset::Start(Options("no_hello=1"), regions_);
  ASSERT_FALSE(dataset.ok());
  EXPECT_TRUE(absl::IsUnavailable(dataset.status())) << dataset.status();
  EXPECT_THAT(dataset.status().message(), HasSubstr("exit code 3"));
  EXPECT_THAT(dataset.status().message(), HasSubstr("ended before it loaded"));
}

TEST_F(PythonDatasetTest, AnInterpreterThatCannotBeStartedIsNamed) {
  PythonDatasetOptions options = Options("samples=4");
  options.worker.python = "/nonexistent/python3";
  absl::StatusOr<std::unique_ptr<PythonDataset>> dataset = PythonDataset::Start(options, regions_);
  ASSERT_FALSE(dataset.ok());
  EXPECT_THAT(dataset.status().message(), HasSubstr("/nonexistent/python3"));
}

}  // namespace
}  // namespace heterodl
