#include "src/client/sample_failure_budget.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heterodl {
namespace {

using ::testing::HasSubstr;

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

// A batch of `size` samples of `epoch` whose first `replaced` slots were
// replaced and next `unfilled` left unfilled.
Batch Failing(uint32_t epoch, int size, int replaced, int unfilled = 0) {
  Batch batch;
  batch.epoch = epoch;
  for (int i = 0; i < size; ++i) {
    SlotStatus status = SlotStatus::kOk;
    if (i < replaced) {
      status = SlotStatus::kReplaced;
    } else if (i < replaced + unfilled) {
      status = SlotStatus::kUnfilled;
    }
    batch.status.push_back(status);
    if (status != SlotStatus::kOk) {
      batch.failures.push_back(absl::StrCat("NOT_FOUND: cannot open 'img", i, ".jpg'"));
    }
  }
  batch.failed = replaced + unfilled;
  return batch;
}

SampleFailureOptions Options(double fraction, int64_t samples) {
  SampleFailureOptions options;
  options.max_failed_fraction = fraction;
  options.samples_per_epoch = samples;
  options.dataset = "/data/list.txt";
  return options;
}

TEST(SampleFailureBudgetTest, FailuresAreSaidAtOnceWithTheServersReasonsThenRateLimited) {
  SampleFailureBudget budget(Options(0.5, 1000));
  SampleFailureBudget::Verdict first = budget.Note(Failing(0, 10, 2, 1), kStart);
  ASSERT_TRUE(first.log_line.has_value());
  EXPECT_TRUE(first.over.ok());
  EXPECT_THAT(*first.log_line, HasSubstr("3 samples of epoch 0 could not be read or decoded"));
  EXPECT_THAT(*first.log_line, HasSubstr("2 replaced by other samples, 1 left unfilled"));
  EXPECT_THAT(*first.log_line, HasSubstr("cannot open 'img0.jpg'"));
  EXPECT_THAT(*first.log_line, HasSubstr("cannot open 'img1.jpg'"));
  EXPECT_THAT(*first.log_line, HasSubstr("500 allowed of 1000"));
  // Within the next 10 s: counted, not said.
  EXPECT_FALSE(budget.Note(Failing(0, 10, 4), kStart + absl::Seconds(5)).log_line);
  // A clean batch says nothing either.
  EXPECT_FALSE(budget.Note(Failing(0, 10, 0), kStart + absl::Seconds(20)).log_line);
  // Then the failures since the last line, together.
  SampleFailureBudget::Verdict later = budget.Note(Failing(0, 10, 1), kStart + absl::Seconds(21));
  ASSERT_TRUE(later.log_line.has_value());
  EXPECT_THAT(*later.log_line, HasSubstr("5 samples of epoch 0"));
  EXPECT_THAT(*later.log_line, HasSubstr("8 this epoch"));
  EXPECT_EQ(budget.failed_this_epoch(), 8);
}

TEST(SampleFailureBudgetTest, MoreThanTheShareOfAnEpochIsADataLossNamingTheDataset) {
  SampleFailureBudget budget(Options(0.05, 100));  // 5 allowed
  EXPECT_EQ(budget.allowed_per_epoch(), 5);
  EXPECT_TRUE(budget.Note(Failing(0, 10, 5), kStart).over.ok());
  const SampleFailureBudget::Verdict over = budget.Note(Failing(0, 10, 1), kStart);
  EXPECT_TRUE(absl::IsDataLoss(over.over)) << over.over;
  EXPECT_THAT(over.over.message(), HasSubstr("6 of this rank's 100 samples of epoch 0"));
  EXPECT_THAT(over.over.message(), HasSubstr("dataset /data/list.txt"));
  EXPECT_THAT(over.over.message(), HasSubstr("cannot open 'img0.jpg'"));
  EXPECT_THAT(over.over.message(), HasSubstr("max_failed_fraction"));
  // It stays over, whatever comes next.
  EXPECT_FALSE(budget.Note(Failing(0, 10, 0), kStart).over.ok());
  budget.StartEpoch(1);
  EXPECT_FALSE(budget.Note(Failing(1, 10, 0), kStart).over.ok());
}

TEST(SampleFailureBudgetTest, EachEpochHasItsOwnBudget) {
  SampleFailureBudget budget(Options(0.05, 100));
  EXPECT_TRUE(budget.Note(Failing(0, 10, 5), kStart).over.ok());
  budget.StartEpoch(1);
  EXPECT_EQ(budget.failed_this_epoch(), 0);
  EXPECT_TRUE(budget.Note(Failing(1, 10, 5), kStart).over.ok());
  // A batch of the next epoch starts its count too (prefetch across epochs
  // delivers it before the trainer says so).
  EXPECT_TRUE(budget.Note(Failing(2, 10, 5), kStart).over.ok());
  EXPECT_EQ(budget.failed_this_epoch(), 5);
}

TEST(SampleFailureBudgetTest, NoneAllowedAndAllAllowed) {
  SampleFailureBudget strict(Options(0, 100));
  EXPECT_FALSE(strict.Note(Failing(0, 10, 1), kStart).over.ok());
  SampleFailureBudget tolerant(Options(1, 20));
  EXPECT_TRUE(tolerant.Note(Failing(0, 10, 0, 10), kStart).over.ok());
  EXPECT_TRUE(tolerant.Note(Failing(0, 10, 0, 10), kStart).over.ok());
}

}  // namespace
}  // namespace heterodl
