#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/data/batch_assembler.h"
#include "src/data/dataset.h"
#include "tests/testing/test_images.h"

namespace heterodl {
namespace {

using Members = std::vector<std::pair<std::string, std::string>>;

// Writes a tar (pax, as Python's tarfile does by default) with libarchive.
void WriteShard(const std::string& path, const Members& members, bool gzip = false) {
  archive* writer = archive_write_new();
  archive_write_set_format_pax_restricted(writer);
  if (gzip) {
    archive_write_add_filter_gzip(writer);
  }
  ASSERT_EQ(archive_write_open_filename(writer, path.c_str()), ARCHIVE_OK);
  for (const auto& [name, data] : members) {
    archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, name.c_str());
    archive_entry_set_size(entry, static_cast<la_int64_t>(data.size()));
    archive_entry_set_filetype(entry, AE_IFREG);
    archive_entry_set_perm(entry, 0644);
    archive_write_header(writer, entry);
    archive_write_data(writer, data.data(), data.size());
    archive_entry_free(entry);
  }
  archive_write_close(writer);
  archive_write_free(writer);
}

class TarShardsTest : public ::testing::Test {
 protected:
  std::string Jpeg(int seed) { return testing::MakeJpeg(40 + seed, 30, seed); }
};

TEST_F(TarShardsTest, FolderOfShardsInShardAndMemberOrder) {
  const std::filesystem::path dir = testing::MakeTempDir("shards");
  const std::string long_key = std::string(120, 'k') + "/deep/sample";  // needs a pax header
  WriteShard((dir / "train-000001.tar").string(),
             {{"s3.jpg", Jpeg(3)}, {"s3.cls", "2"}, {"s4.cls", "0\n"}, {"s4.jpg", Jpeg(4)}});
  WriteShard((dir / "train-000000.tar").string(),
             {{"s0.jpg", Jpeg(0)},
              {"s0.cls", "1"},
              {"s0.json", "{}"},  // other WebDataset fields are ignored
              {long_key + ".png", "not decoded here"},
              {long_key + ".cls", "3"},
              {"s2.jpg", Jpeg(2)},
              {"s2.cls", "0"}});
  absl::StatusOr<Dataset> dataset = Dataset::Open(dir.string());
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  ASSERT_EQ(dataset->size(), 5u);
  EXPECT_EQ(dataset->sample(0).path, "train-000000.tar:s0.jpg");
  EXPECT_EQ(dataset->sample(1).label, 3);
  EXPECT_EQ(dataset->sample(3).path, "train-000001.tar:s3.jpg");
  EXPECT_EQ(dataset->sample(4).label, 0);
  EXPECT_EQ(dataset->class_names().size(), 4u);
  // What a block-shuffled plan permutes.
  EXPECT_EQ(dataset->shard_sizes(), (std::vector<uint64_t>{3, 2}));
  EXPECT_EQ(*dataset->ReadSample(0), Jpeg(0));
  EXPECT_EQ(*dataset->ReadSample(1), "not decoded here");
  EXPECT_EQ(*dataset->ReadSample(4), Jpeg(4));

  // A single shard opens on its own, and decodes through the pipeline.
  absl::StatusOr<Dataset> single = Dataset::Open((dir / "train-000001.tar").string());
  ASSERT_TRUE(single.ok()) << single.status();
  absl::StatusOr<Pipeline> pipeline = Pipeline::Parse("center_crop(16)");
  BatchAssembler assembler(*single, *pipeline, MaskIds::kNone);
  std::vector<uint8_t> pixels(2 * assembler.image_bytes());
  StageSeconds seconds;
  const std::vector<int64_t> indices = {0, 1};
  std::vector<SlotResult> slots = assembler.Assemble({0, 0, indices}, {pixels.data()}, &seconds);
  EXPECT_EQ(slots[0].outcome, SampleOutcome::kOk);
  EXPECT_EQ(slots[1].outcome, SampleOutcome::kOk);
}

TEST_F(TarShardsTest, BadShardsAreClearErrors) {
  const std::filesystem::path dir = testing::MakeTempDir("bad_shards");
  const std::string no_label = (dir / "no_label.tar").string();
  WriteShard(no_label, {{"a.jpg", Jpeg(0)}, {"b.jpg", Jpeg(1)}, {"b.cls", "1"}});
  absl::StatusOr<Dataset> dataset = Dataset::Open(no_label);
  ASSERT_FALSE(dataset.ok());
  EXPECT_NE(dataset.status().message().find("sample 'a' has an image but no .cls"),
            std::string::npos)
      << dataset.status();

  const std::string bad_label = (dir / "bad_label.tar").string();
  WriteShard(bad_label, {{"a.jpg", Jpeg(0)}, {"a.cls", "cat"}});
  dataset = Dataset::Open(bad_label);
  ASSERT_FALSE(dataset.ok());
  EXPECT_NE(dataset.status().message().find("'a.cls' is not a label"), std::string::npos);

  // A label is a promise of that many classes: bounded.
  const std::string huge_label = (dir / "huge_label.tar").string();
  WriteShard(huge_label, {{"a.jpg", Jpeg(0)}, {"a.cls", "99999999999"}});
  dataset = Dataset::Open(huge_label);
  ASSERT_FALSE(dataset.ok());
  EXPECT_NE(dataset.status().message().find("over the largest label"), std::string::npos)
      << dataset.status();

  // A FIFO named like a shard is refused at once, not opened and waited on.
  const std::string fifo = (dir / "fifo.tar").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  dataset = Dataset::Open(fifo);
  ASSERT_FALSE(dataset.ok());
  EXPECT_NE(dataset.status().message().find("not a regular file"), std::string::npos)
      << dataset.status();

  const std::string compressed = (dir / "compressed.tar").string();
  WriteShard(compressed, {{"a.jpg", Jpeg(0)}, {"a.cls", "0"}}, /*gzip=*/true);
  dataset = Dataset::Open(compressed);
  ASSERT_FALSE(dataset.ok());
  EXPECT_NE(dataset.status().message().find("uncompressed tar"), std::string::npos)
      << dataset.status();

  const std::string truncated = (dir / "truncated.tar").string();
  WriteShard(truncated, {{"a.jpg", Jpeg(0)}, {"a.cls", "0"}, {"b.jpg", Jpeg(1)}, {"b.cls", "1"}});
  std::filesystem::resize_file(truncated, 700);
  dataset = Dataset::Open(truncated);
  EXPECT_FALSE(dataset.ok());
}

TEST_F(TarShardsTest, AMemberOverTheFileLimitIsABadSampleNotAnAllocation) {
  const std::filesystem::path dir = testing::MakeTempDir("big_member");
  const std::string shard = (dir / "shard.tar").string();
  const std::string big = testing::MakeJpeg(400, 300, 3);
  const std::string small_jpeg = Jpeg(1);
  ASSERT_GT(big.size(), small_jpeg.size());
  WriteShard(shard, {{"a.jpg", big}, {"a.cls", "0"}, {"b.jpg", small_jpeg}, {"b.cls", "1"}});
  absl::StatusOr<Dataset> dataset = Dataset::Open(shard, DatasetLimits{small_jpeg.size()});
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  const absl::StatusOr<std::string> refused = dataset->ReadSample(0);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("more than the limit"), std::string::npos);
  const absl::StatusOr<std::string> small = dataset->ReadSample(1);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(*small, small_jpeg);
}

TEST_F(TarShardsTest, SegmentationShardsPairEveryImageWithItsMask) {
  const std::filesystem::path dir = testing::MakeTempDir("mask_shards");
  const std::string shard = (dir / "seg.tar").string();
  WriteShard(shard, {{"a.jpg", Jpeg(0)},
                     {"a.mask.png", "mask a"},
                     {"b.mask.png", std::string(3000, 'm')},
                     {"b.jpg", Jpeg(1)}});
  absl::StatusOr<Dataset> dataset = Dataset::Open(shard, {2048, ""});
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_TRUE(dataset->has_masks());
  ASSERT_EQ(dataset->size(), 2u);
  EXPECT_EQ(dataset->sample(0).mask_path, "seg.tar:a.mask.png");
  EXPECT_EQ(*dataset->ReadMask(0), "mask a");
  EXPECT_EQ(*dataset->ReadSample(0), Jpeg(0));
  // A mask member over the file limit is refused, as an image is.
  const absl::Status big = dataset->ReadMask(1).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(big)) << big;
  // Labelled and masked samples do not mix.
  const std::string mixed = (dir / "mixed.tar").string();
  WriteShard(mixed, {{"a.jpg", Jpeg(0)}, {"a.mask.png", "m"}, {"c.jpg", Jpeg(2)}, {"c.cls", "1"}});
  const absl::Status status = Dataset::Open(mixed).status();
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_NE(status.message().find("sample 'c' has no .mask.png"), std::string::npos) << status;
}

}  // namespace
}  // namespace heterodl
