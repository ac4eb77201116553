#include "src/data/batch_assembler.h"

#include <algorithm>
#include <atomic>

#include "gtest/gtest.h"
#include "tests/testing/test_images.h"

namespace heterodl {
namespace {

using ::heterodl::testing::MakeImageFolder;
using ::heterodl::testing::WriteFile;

class BatchAssemblerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeImageFolder("assembler", 2, 4);
    // Sample 1 (class0/img1.jpg) is not an image; sample 2 is empty.
    WriteFile(root_ / "class0" / "img1.jpg", "this is not a jpeg");
    WriteFile(root_ / "class0" / "img2.jpg", "");
    dataset_ = std::make_unique<Dataset>(*Dataset::Open(root_.string()));
    pipeline_ = std::make_unique<Pipeline>(*Pipeline::Parse("random_resized_crop(32)|hflip(0.5)"));
  }

  std::filesystem::path root_;
  std::unique_ptr<Dataset> dataset_;
  std::unique_ptr<Pipeline> pipeline_;
};

TEST_F(BatchAssemblerTest, AssemblesDeterministically) {
  BatchAssembler assembler(*dataset_, *pipeline_);
  const std::vector<int64_t> indices = {0, 3, 5, 7};
  std::vector<uint8_t> first(indices.size() * assembler.sample_bytes());
  std::vector<uint8_t> second(first.size());
  StageSeconds seconds;
  std::vector<SlotResult> slots = assembler.Assemble({9, 2, indices}, first.data(), &seconds);
  assembler.Assemble({9, 2, indices}, second.data(), &seconds);
  EXPECT_EQ(first, second);
  ASSERT_EQ(slots.size(), 4u);
  for (size_t i = 0; i < slots.size(); ++i) {
    EXPECT_EQ(slots[i].index, indices[i]);
    EXPECT_EQ(slots[i].outcome, SampleOutcome::kOk);
    EXPECT_EQ(slots[i].label, dataset_->sample(indices[i]).label);
  }
  std::vector<uint8_t> other_epoch(first.size());
  assembler.Assemble({9, 3, indices}, other_epoch.data(), &seconds);
  EXPECT_NE(first, other_epoch);
}

TEST_F(BatchAssemblerTest, BadSamplesAreReplacedDeterministicallyAndCounted) {
  BatchAssembler assembler(*dataset_, *pipeline_);
  const std::vector<int64_t> indices = {1, 2, 4};
  std::vector<uint8_t> first(indices.size() * assembler.sample_bytes());
  std::vector<uint8_t> second(first.size());
  StageSeconds seconds;
  std::vector<SlotResult> a = assembler.Assemble({1, 0, indices}, first.data(), &seconds);
  std::vector<SlotResult> b = assembler.Assemble({1, 0, indices}, second.data(), &seconds);
  EXPECT_EQ(first, second);
  EXPECT_NE(a[0].outcome, SampleOutcome::kOk);
  EXPECT_NE(a[1].outcome, SampleOutcome::kOk);
  EXPECT_EQ(a[2].outcome, SampleOutcome::kOk);
  EXPECT_EQ(a[0].index, 1);  // the slot still names the planned sample
  EXPECT_EQ(a[0].label, b[0].label);
  EXPECT_EQ(assembler.distinct_failed_samples(), 2);
}

TEST_F(BatchAssemblerTest, AnAbandonedBatchBuildsNothingAndBlamesNoSample) {
  BatchAssembler assembler(*dataset_, *pipeline_);
  const std::vector<int64_t> indices = {0, 1, 3};  // 1 is no image
  std::vector<uint8_t> pixels(indices.size() * assembler.sample_bytes(), 7);
  std::atomic<bool> abandoned{true};
  StageSeconds seconds;
  const std::vector<SlotResult> slots =
      assembler.Assemble({1, 0, indices, &abandoned}, pixels.data(), &seconds);
  for (const SlotResult& slot : slots) {
    EXPECT_EQ(slot.outcome, SampleOutcome::kAbandoned) << slot.index;
  }
  EXPECT_EQ(seconds.read, 0);  // not even read
  EXPECT_TRUE(std::all_of(pixels.begin(), pixels.end(), [](uint8_t v) { return v == 7; }));
  EXPECT_EQ(assembler.distinct_failed_samples(), 0);
}

}  // namespace
}  // namespace heterodl
