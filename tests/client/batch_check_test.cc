#include "src/client/batch_check.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "src/wire/batch_layout.h"

namespace heterodl {
namespace {

constexpr uint64_t kLimit = 64 << 20;

class BatchCheckTest : public ::testing::Test {
 protected:
  BatchCheckTest() {
    PlanParams params;
    params.num_samples = 50;
    params.seed = 3;
    params.world_size = 2;
    params.batch_size = 8;
    plan_ = std::make_unique<EpochPlan>(*EpochPlan::Create(params, 4));
    *fields_.Add() = ImagesField(32, 24);
  }

  // The header an honest server sends for batch `k` of rank 1.
  v1::Batch Honest(int64_t k) const {
    v1::Batch header;
    header.mutable_id()->set_epoch(4);
    header.mutable_id()->set_rank(1);
    header.mutable_id()->set_index(static_cast<uint32_t>(k));
    header.set_height(32);
    header.set_width(24);
    header.set_channels(3);
    for (int64_t index : plan_->BatchIndices(1, k)) {
      header.add_indices(index);
      header.add_labels(index % 5);
      header.add_status(v1::SAMPLE_OK);
    }
    return header;
  }

  absl::StatusOr<uint64_t> Check(const v1::Batch& header) const {
    return CheckBatchHeader(header, *plan_, 1, fields_, kLimit);
  }

  std::unique_ptr<EpochPlan> plan_;
  google::protobuf::RepeatedPtrField<v1::FieldSpec> fields_;
};

TEST_F(BatchCheckTest, AnHonestHeaderGivesItsPixelBytes) {
  EXPECT_EQ(*Check(Honest(0)), 8u * 32 * 24 * 3);
  // The last batch is short: 25 samples per rank, batches of 8.
  EXPECT_EQ(*Check(Honest(3)), 1u * 32 * 24 * 3);
  v1::Batch on_channel = Honest(0);
  on_channel.set_images_on_channel(uint64_t{8} * 32 * 24 * 3);
  EXPECT_TRUE(Check(on_channel).ok());
}

TEST_F(BatchCheckTest, ForgedHeadersAreDataLoss) {
  std::vector<std::pair<const char*, v1::Batch>> forged;
  auto add = [&](const char* what, auto change) {
    v1::Batch header = Honest(1);
    change(header);
    forged.emplace_back(what, header);
  };
  add("other samples", [](v1::Batch& h) { h.set_indices(2, h.indices(2) + 1); });
  add("a label missing", [](v1::Batch& h) { h.mutable_labels()->RemoveLast(); });
  add("an index too many", [](v1::Batch& h) { h.add_indices(7); });
  add("a status missing", [](v1::Batch& h) { h.mutable_status()->RemoveLast(); });
  add("more failed than samples", [](v1::Batch& h) { h.set_failed(9); });
  add("a failed count no status says", [](v1::Batch& h) { h.set_failed(1); });
  add("a status of no meaning",
      [](v1::Batch& h) { h.set_status(0, static_cast<v1::SampleStatus>(7)); });
  add("a failed slot without sources", [](v1::Batch& h) {
    h.set_status(0, v1::SAMPLE_REPLACED);
    h.set_failed(1);
  });
  add("a source for every slot but one", [](v1::Batch& h) {
    h.set_status(0, v1::SAMPLE_REPLACED);
    h.set_failed(1);
    for (int i = 0; i + 1 < h.indices_size(); ++i) {
      h.add_sources(h.indices(i));
    }
  });
  add("a source outside the dataset", [](v1::Batch& h) {
    h.set_status(0, v1::SAMPLE_REPLACED);
    h.set_failed(1);
    for (int i = 0; i < h.indices_size(); ++i) {
      h.add_sources(i == 0 ? 50 : h.indices(i));
    }
  });
  add("an unfilled slot with a source", [](v1::Batch& h) {
    h.set_status(0, v1::SAMPLE_ZERO_FILLED);
    h.set_failed(1);
    for (int i = 0; i < h.indices_size(); ++i) {
      h.add_sources(h.indices(i));
    }
  });
  add("more reasons than failures", [](v1::Batch& h) {
    h.set_status(0, v1::SAMPLE_REPLACED);
    h.set_failed(1);
    for (int i = 0; i < h.indices_size(); ++i) {
      h.add_sources(h.indices(i));
    }
    h.add_failures("a");
    h.add_failures("b");
  });
  add("four channels", [](v1::Batch& h) { h.set_channels(4); });
  add("no height", [](v1::Batch& h) { h.set_height(0); });
  add("a side too long", [](v1::Batch& h) { h.set_width(kMaxImageSide + 1); });
  add("another shape than declared", [](v1::Batch& h) { h.set_width(25); });
  add("ragged lengths for no ragged field",
      [](v1::Batch& h) { h.add_ragged_lengths()->add_lengths(1); });
  add("a pixel channel count one short",
      [](v1::Batch& h) { h.set_images_on_channel(8u * 32 * 24 * 3 - 1); });
  add("a pixel channel count of 2^63", [](v1::Batch& h) { h.set_images_on_channel(1ull << 63); });
  for (const auto& [what, header] : forged) {
    const absl::StatusOr<uint64_t> bytes = Check(header);
    EXPECT_EQ(bytes.status().code(), absl::StatusCode::kDataLoss) << what;
  }
}

TEST_F(BatchCheckTest, FailedSlotsSayWhatFillsThemAndWhy) {
  v1::Batch header = Honest(0);
  header.set_status(0, v1::SAMPLE_REPLACED);
  header.set_status(1, v1::SAMPLE_ZERO_FILLED);
  header.set_failed(2);
  for (int i = 0; i < header.indices_size(); ++i) {
    header.add_sources(i == 0 ? 49 : i == 1 ? -1 : header.indices(i));
  }
  header.add_failures("NOT_FOUND: cannot open 'a.jpg'");
  header.add_failures("INVALID_ARGUMENT: not an image");
  EXPECT_TRUE(Check(header).ok()) << Check(header).status();
}

TEST_F(BatchCheckTest, AShapeOverTheLimitIsRefusedWithoutOverflow) {
  v1::Batch header = Honest(0);
  header.set_height(kMaxImageSide);
  header.set_width(kMaxImageSide);  // 8 x 65536^2 x 3 = 103 GB
  header.set_images_on_channel(8ull * kMaxImageSide * kMaxImageSide * 3);
  fields_.Clear();
  *fields_.Add() = ImagesField(kMaxImageSide, kMaxImageSide);
  const absl::StatusOr<uint64_t> bytes = Check(header);
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(bytes.status().message().find("max_batch_bytes"), std::string::npos) << bytes.status();
}

TEST_F(BatchCheckTest, APayloadOfSeveralFieldsIsCheckedWhole) {
  // Images, then each sample's boxes (ragged float32 [4]).
  v1::FieldSpec* boxes = fields_.Add();
  boxes->set_name("boxes");
  boxes->set_dtype(v1::DTYPE_FLOAT32);
  boxes->add_shape(4);
  boxes->set_ragged(true);
  v1::Batch header = Honest(0);
  v1::RaggedLengths* lengths = header.add_ragged_lengths();
  for (int i = 0; i < 8; ++i) {
    lengths->add_lengths(i % 3);  // 0+1+2+0+1+2+0+1 = 7 boxes
  }
  const uint64_t images = uint64_t{8} * 32 * 24 * 3;  // 18432, a multiple of 64
  EXPECT_EQ(*Check(header), images + uint64_t{7} * 4 * 4);
  header.set_images_on_channel(images);  // the boxes left out
  EXPECT_EQ(Check(header).status().code(), absl::StatusCode::kDataLoss);
  header.set_images_on_channel(0);
  header.mutable_ragged_lengths(0)->set_lengths(3, 1 << 20);
  EXPECT_EQ(Check(header).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(BatchCheckTest, ImpossibleTimingsReadAsZero) {
  v1::Batch header = Honest(0);
  header.set_queue_seconds(0.25);
  header.set_build_seconds(0.5);
  EXPECT_EQ(TimingOf(header).queued, absl::Milliseconds(250));
  EXPECT_EQ(TimingOf(header).built, absl::Milliseconds(500));
  for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity(), 1e300}) {
    header.set_queue_seconds(bad);
    header.set_build_seconds(bad);
    EXPECT_EQ(TimingOf(header).queued, absl::ZeroDuration()) << bad;
    EXPECT_EQ(TimingOf(header).built, absl::ZeroDuration()) << bad;
  }
}

}  // namespace
}  // namespace heterodl
