#include "src/data/batch_assembler.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"
#include "tests/testing/test_images.h"

namespace heterodl {
namespace {

using ::heterodl::testing::kSixteenBitIdScale;
using ::heterodl::testing::MakeImageFolder;
using ::heterodl::testing::MakePaintedSegmentationFolder;
using ::heterodl::testing::PixelsOffTheirClass;
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
  BatchAssembler assembler(*dataset_, *pipeline_, MaskIds::kNone);
  const std::vector<int64_t> indices = {0, 3, 5, 7};
  std::vector<uint8_t> first(indices.size() * assembler.image_bytes());
  std::vector<uint8_t> second(first.size());
  StageSeconds seconds;
  std::vector<SlotResult> slots = assembler.Assemble({9, 2, indices}, {first.data()}, &seconds);
  assembler.Assemble({9, 2, indices}, {second.data()}, &seconds);
  EXPECT_EQ(first, second);
  ASSERT_EQ(slots.size(), 4u);
  for (size_t i = 0; i < slots.size(); ++i) {
    EXPECT_EQ(slots[i].index, indices[i]);
    EXPECT_EQ(slots[i].outcome, SampleOutcome::kOk);
    EXPECT_EQ(slots[i].label, dataset_->sample(indices[i]).label);
  }
  std::vector<uint8_t> other_epoch(first.size());
  assembler.Assemble({9, 3, indices}, {other_epoch.data()}, &seconds);
  EXPECT_NE(first, other_epoch);
}

TEST_F(BatchAssemblerTest, BadSamplesAreReplacedDeterministicallyAndCounted) {
  BatchAssembler assembler(*dataset_, *pipeline_, MaskIds::kNone);
  const std::vector<int64_t> indices = {1, 2, 4};
  std::vector<uint8_t> first(indices.size() * assembler.image_bytes());
  std::vector<uint8_t> second(first.size());
  StageSeconds seconds;
  std::vector<SlotResult> a = assembler.Assemble({1, 0, indices}, {first.data()}, &seconds);
  std::vector<SlotResult> b = assembler.Assemble({1, 0, indices}, {second.data()}, &seconds);
  EXPECT_EQ(first, second);
  EXPECT_NE(a[0].outcome, SampleOutcome::kOk);
  EXPECT_NE(a[1].outcome, SampleOutcome::kOk);
  EXPECT_EQ(a[2].outcome, SampleOutcome::kOk);
  EXPECT_EQ(a[0].index, 1);  // the slot still names the planned sample
  EXPECT_EQ(a[0].label, b[0].label);
  EXPECT_EQ(assembler.distinct_failed_samples(), 2);
  // Each failed slot says which sample fills it, whose label it carries,
  // and why its own failed, naming the file.
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(a[i].outcome, SampleOutcome::kReplaced) << i;
    EXPECT_NE(a[i].source, a[i].index);
    EXPECT_EQ(a[i].source, b[i].source);
    EXPECT_EQ(a[i].label, dataset_->sample(static_cast<size_t>(a[i].source)).label);
    EXPECT_NE(a[i].failure.find(absl::StrCat("img", a[i].index, ".jpg")), std::string::npos)
        << a[i].failure;
  }
  EXPECT_EQ(a[2].source, 4);
  EXPECT_TRUE(a[2].failure.empty());
}

TEST_F(BatchAssemblerTest, ASlotNoSampleCouldFillCarriesTheIgnoreLabelNotItsOwn) {
  for (int i = 0; i < 4; ++i) {
    WriteFile(root_ / "class1" / absl::StrCat("img", i, ".jpg"), "gone");
    WriteFile(root_ / "class0" / absl::StrCat("img", i, ".jpg"), "gone");
  }
  const Dataset broken = *Dataset::Open(root_.string());
  BatchAssembler assembler(broken, *pipeline_, MaskIds::kNone);
  const std::vector<int64_t> indices = {5, 6};  // class 1
  std::vector<uint8_t> pixels(indices.size() * assembler.image_bytes(), 9);
  StageSeconds seconds;
  for (const SlotResult& slot : assembler.Assemble({1, 0, indices}, {pixels.data()}, &seconds)) {
    EXPECT_EQ(slot.outcome, SampleOutcome::kZeroFilled);
    EXPECT_EQ(slot.label, kUnfilledLabel);  // not class 1: a loss skips it
    EXPECT_EQ(slot.source, -1);
    EXPECT_NE(slot.failure.find("not"), std::string::npos) << slot.failure;
  }
  EXPECT_TRUE(std::all_of(pixels.begin(), pixels.end(), [](uint8_t v) { return v == 0; }));
}

TEST_F(BatchAssemblerTest, AnAbandonedBatchBuildsNothingAndBlamesNoSample) {
  BatchAssembler assembler(*dataset_, *pipeline_, MaskIds::kNone);
  const std::vector<int64_t> indices = {0, 1, 3};  // 1 is no image
  std::vector<uint8_t> pixels(indices.size() * assembler.image_bytes(), 7);
  std::atomic<bool> abandoned{true};
  StageSeconds seconds;
  const std::vector<SlotResult> slots =
      assembler.Assemble({1, 0, indices, &abandoned}, {pixels.data()}, &seconds);
  for (const SlotResult& slot : slots) {
    EXPECT_EQ(slot.outcome, SampleOutcome::kAbandoned) << slot.index;
  }
  EXPECT_EQ(seconds.read, 0);  // not even read
  EXPECT_TRUE(std::all_of(pixels.begin(), pixels.end(), [](uint8_t v) { return v == 7; }));
  EXPECT_EQ(assembler.distinct_failed_samples(), 0);
}

// Segmentation: images painted with their classes' colours, so that a mask
// that does not follow its image shows.
class MaskAssemblyTest : public ::testing::Test {
 protected:
  static constexpr int kSamples = 12;

  // Assembles every sample once with `spec`; the slots' outcomes.
  std::vector<SlotResult> AssembleAll(const Dataset& dataset, const std::string& spec, MaskIds ids,
                                      int ignore_index = 255) {
    PipelineOptions options;
    options.mask_ignore_index = ignore_index;
    absl::StatusOr<Pipeline> parsed = Pipeline::Parse(spec, options);
    if (!parsed.ok()) {
      ADD_FAILURE() << parsed.status();
      return {};
    }
    pipeline_ = std::make_unique<Pipeline>(*std::move(parsed));
    assembler_ = std::make_unique<BatchAssembler>(dataset, *pipeline_, ids);
    std::vector<int64_t> indices(dataset.size());
    std::iota(indices.begin(), indices.end(), 0);
    images_.assign(indices.size() * assembler_->image_bytes(), 0);
    masks_.assign(indices.size() * assembler_->mask_bytes(), 0);
    StageSeconds seconds;
    return assembler_->Assemble({5, 1, indices}, {images_.data(), masks_.data()}, &seconds);
  }

  std::unique_ptr<Pipeline> pipeline_;
  std::unique_ptr<BatchAssembler> assembler_;
  std::vector<uint8_t> images_;
  std::vector<uint8_t> masks_;
};

TEST_F(MaskAssemblyTest, EveryGeometricOperationMovesTheMaskWithItsImage) {
  const std::filesystem::path root = MakePaintedSegmentationFolder("painted8", kSamples, 3);
  absl::StatusOr<Dataset> dataset = Dataset::Open(root.string());
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  ASSERT_EQ(MaskIdsOf(*dataset, 1 << 20), MaskIds::kUint8);
  for (const std::string spec : {"random_resized_crop(40x56)|hflip(0.5)", "resize(48x40)|hflip(1)",
                                 "random_resize(30,90)|random_crop(48x64,pad_if_needed=true)",
                                 "scale_jitter(48x64,scale_range=0.5:1.5)|center_crop(48x64)",
                                 "resize(64)|rotation(40)|center_crop(44x52)"}) {
    const std::vector<SlotResult> slots = AssembleAll(*dataset, spec, MaskIds::kUint8);
    const int height = pipeline_->output_height();
    const int width = pipeline_->output_width();
    ASSERT_EQ(assembler_->mask_bytes(), static_cast<size_t>(height) * width) << spec;
    int64_t judged_in_all = 0;
    int64_t off_when_flipped = 0;
    for (size_t slot = 0; slot < slots.size(); ++slot) {
      EXPECT_EQ(slots[slot].outcome, SampleOutcome::kOk) << spec;
      uint8_t* image = &images_[slot * assembler_->image_bytes()];
      uint8_t* mask = &masks_[slot * assembler_->mask_bytes()];
      int64_t judged = 0;
      // A slip of the image's interpolation past a mask's nearest sample
      // may land on a shape's thinnest tip: a handful of pixels, where a
      // mask that does not follow shows hundreds.
      const int64_t off = PixelsOffTheirClass(image, mask, height, width, 1, 1, 255, &judged);
      EXPECT_LE(off, judged / 100) << spec << ", sample " << slot;
      judged_in_all += judged;
      // The check fails a mask that does not follow: one left unflipped.
      cv::Mat ids(height, width, CV_8UC1, mask);
      cv::flip(ids, ids, 1);
      off_when_flipped += PixelsOffTheirClass(image, mask, height, width, 1, 1, 255);
    }
    // Most pixels are judged: the check is not vacuous.
    EXPECT_GT(judged_in_all, static_cast<int64_t>(slots.size()) * height * width / 2) << spec;
    EXPECT_GT(off_when_flipped, judged_in_all / 10) << spec;
  }
}

TEST_F(MaskAssemblyTest, SixteenBitMasksGoOutAsInt32) {
  const std::filesystem::path root =
      MakePaintedSegmentationFolder("painted16", kSamples, 4, /*sixteen_bit=*/true);
  absl::StatusOr<Dataset> dataset = Dataset::Open(root.string());
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  ASSERT_EQ(MaskIdsOf(*dataset, 1 << 20), MaskIds::kInt32);
  const std::vector<SlotResult> slots = AssembleAll(
      *dataset, "random_resized_crop(32x48)|hflip(0.5)|rotation(30)", MaskIds::kInt32, 9999);
  ASSERT_EQ(assembler_->mask_bytes(), 32u * 48 * 4);
  bool saw_ignore = false;
  for (size_t slot = 0; slot < slots.size(); ++slot) {
    EXPECT_EQ(slots[slot].outcome, SampleOutcome::kOk);
    const auto* ids = reinterpret_cast<const int32_t*>(&masks_[slot * assembler_->mask_bytes()]);
    int64_t judged = 0;
    const int64_t off = PixelsOffTheirClass(&images_[slot * assembler_->image_bytes()], ids, 32, 48,
                                            4, kSixteenBitIdScale, 9999, &judged);
    EXPECT_LE(off, judged / 100) << slot;
    for (int i = 0; i < 32 * 48; ++i) {
      ASSERT_TRUE(ids[i] == 9999 || ids[i] % kSixteenBitIdScale == 0) << ids[i];
      saw_ignore |= ids[i] == 9999;
    }
  }
  EXPECT_TRUE(saw_ignore);  // a rotation's corners, filled with the ignore index
}

TEST_F(MaskAssemblyTest, AMaskThatIsNotItsImagesIsABadSampleAndAnUnfilledSlotIsIgnored) {
  const std::filesystem::path root = MakePaintedSegmentationFolder("painted-bad", 8, 5);
  // Sample 0's mask is another size, sample 1's is no PNG: both replaced.
  cv::imwrite((root / "masks" / "s0.png").string(), cv::Mat(5, 7, CV_8UC1, cv::Scalar(1)));
  WriteFile(root / "masks" / "s1.png", "not a png");
  absl::StatusOr<Dataset> dataset = Dataset::Open(root.string());
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  std::vector<SlotResult> slots = AssembleAll(*dataset, "resize(24x32)", MaskIds::kUint8);
  for (size_t slot = 0; slot < slots.size(); ++slot) {
    EXPECT_EQ(slots[slot].outcome, slot < 2 ? SampleOutcome::kReplaced : SampleOutcome::kOk);
    int64_t judged = 0;
    const int64_t off =
        PixelsOffTheirClass(&images_[slot * assembler_->image_bytes()],
                            &masks_[slot * assembler_->mask_bytes()], 24, 32, 1, 1, 255, &judged);
    EXPECT_LE(off, judged / 100) << slot;
  }
  EXPECT_EQ(assembler_->distinct_failed_samples(), 2);
  // With no good sample left to replace them, slots are zeros with masks of
  // the ignore index, which a loss skips.
  for (int n = 2; n < 8; ++n) {
    WriteFile(root / "images" / absl::StrCat("s", n, ".png"), "");
  }
  dataset = Dataset::Open(root.string());
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  slots = AssembleAll(*dataset, "resize(24x32)", MaskIds::kUint8, 250);
  for (const SlotResult& slot : slots) {
    EXPECT_EQ(slot.outcome, SampleOutcome::kZeroFilled);
  }
  EXPECT_TRUE(std::all_of(images_.begin(), images_.end(), [](uint8_t v) { return v == 0; }));
  EXPECT_TRUE(std::all_of(masks_.begin(), masks_.end(), [](uint8_t v) { return v == 250; }));
}

TEST_F(MaskAssemblyTest, ASixteenBitMaskInAnEightBitDatasetIsABadSample) {
  const std::filesystem::path root = MakePaintedSegmentationFolder("painted-mixed", 2, 6);
  // Sample 1's mask: 16-bit, its ids over what uint8 holds.
  cv::imwrite(
      (root / "masks" / "s1.png").string(),
      cv::Mat(cv::imread((root / "images" / "s1.png").string()).size(), CV_16UC1, cv::Scalar(300)));
  absl::StatusOr<Dataset> dataset = Dataset::Open(root.string());
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  ASSERT_EQ(MaskIdsOf(*dataset, 1 << 20), MaskIds::kUint8);  // as its first mask
  const std::vector<SlotResult> slots = AssembleAll(*dataset, "resize(16x16)", MaskIds::kUint8);
  EXPECT_EQ(slots[0].outcome, SampleOutcome::kOk);
  EXPECT_NE(slots[1].outcome, SampleOutcome::kOk);
}

}  // namespace
}  // namespace heterodl
