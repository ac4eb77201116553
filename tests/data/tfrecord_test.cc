#include "src/data/tfrecord.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterodl/tf_example.pb.h"
#include "src/data/dataset.h"
#include "tests/testing/status_testing.h"
#include "tests/testing/test_images.h"

namespace heterodl {
namespace {

using ::testing::HasSubstr;

// A serialized tf.train.Example of an image, and a label unless negative.
std::string Example(const std::string& image, int64_t label,
                    const std::string& image_key = "image/encoded") {
  tfrecord::Example example;
  auto& features = *example.mutable_features()->mutable_feature();
  features[image_key].mutable_bytes_list()->add_value(image);
  if (label >= 0) {
    features["image/class/label"].mutable_int64_list()->add_value(label);
  }
  features["image/format"].mutable_bytes_list()->add_value("JPEG");
  return example.SerializeAsString();
}

void WriteFile(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(TfRecordTest, Crc32cIsCastagnolis) {
  // The check value of CRC-32C, and RFC 3720's (iSCSI) test vectors.
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  EXPECT_EQ(Crc32c(""), 0u);
  // The instruction and the table agree at every length and alignment.
  std::string bytes;
  for (int i = 0; i < 300; ++i) {
    bytes.push_back(static_cast<char>(i * 37 + 11));
  }
  for (size_t start = 0; start < 9; ++start) {
    for (size_t size = 0; start + size <= bytes.size(); size += 7) {
      const absl::string_view piece = absl::string_view(bytes).substr(start, size);
      ASSERT_EQ(Crc32c(piece), Crc32cTable(piece)) << start << "+" << size;
    }
  }
}

TEST(TfRecordTest, ARecordIsKnownByItsLengthChecksum) {
  const std::string record = TfRecordOf("hello");
  ASSERT_EQ(record.size(), kTfRecordHeaderBytes + 5 + kTfRecordFooterBytes);
  EXPECT_EQ(TfRecordLength(record), 5u);
  EXPECT_TRUE(TfRecordDataIntact("hello", record.substr(kTfRecordHeaderBytes + 5)));
  EXPECT_FALSE(TfRecordDataIntact("hellO", record.substr(kTfRecordHeaderBytes + 5)));
  std::string damaged = record;
  damaged[3] ^= 1;
  EXPECT_FALSE(TfRecordLength(damaged).has_value());
  EXPECT_FALSE(TfRecordLength("train-00000-of-01024").has_value());
  EXPECT_FALSE(TfRecordLength("short").has_value());
}

TEST(TfRecordTest, AnExampleGivesItsImageAndLabelLessTheOffset) {
  TfExampleKeys keys;
  keys.label_offset = 1;
  ASSERT_OK_AND_ASSIGN(const ExampleParts parts,
                       ParseExample(Example("JPEG BYTES", 7), keys, "f:0"));
  EXPECT_EQ(parts.image, "JPEG BYTES");
  EXPECT_EQ(parts.label, 6);

  const auto missing = ParseExample(Example("x", -1), keys, "f:1");
  ASSERT_TRUE(absl::IsInvalidArgument(missing.status())) << missing.status();
  EXPECT_THAT(missing.status().message(), HasSubstr("f:1: no image/class/label"));
  EXPECT_THAT(missing.status().message(), HasSubstr("image/encoded, image/format"));
  const auto no_image = ParseExample(Example("x", 1, "image/raw"), keys, "f:2");
  EXPECT_THAT(no_image.status().message(), HasSubstr("no image/encoded"));
  const auto negative = ParseExample(Example("x", 0), keys, "f:3");
  EXPECT_THAT(negative.status().message(), HasSubstr("is negative"));
  const auto garbage = ParseExample("\xff\xff\xff", keys, "f:4");
  EXPECT_TRUE(absl::IsDataLoss(garbage.status())) << garbage.status();
}

TEST(TfRecordTest, AFolderOfRecordFilesIsADatasetInFileAndRecordOrder) {
  const std::filesystem::path dir = testing::MakeTempDir("tfrecords");
  std::vector<std::string> jpegs;
  jpegs.reserve(5);
  for (int i = 0; i < 5; ++i) {
    jpegs.push_back(testing::MakeJpeg(40 + i, 30, i));
  }
  // Named as TensorFlow names them: no extension.
  WriteFile(dir / "train-00001-of-00002",
            TfRecordOf(Example(jpegs[3], 2)) + TfRecordOf(Example(jpegs[4], 0)));
  WriteFile(dir / "train-00000-of-00002", TfRecordOf(Example(jpegs[0], 1)) +
                                              TfRecordOf(Example(jpegs[1], 1)) +
                                              TfRecordOf(Example(jpegs[2], 0)));
  WriteFile(dir / ".DS_Store", "not a record");
  ASSERT_OK_AND_ASSIGN(const Dataset dataset, Dataset::Open(dir.string()));
  ASSERT_EQ(dataset.size(), 5u);
  EXPECT_EQ(dataset.class_names(), (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_EQ(dataset.sample(0).path, "train-00000-of-00002:0");
  EXPECT_EQ(dataset.sample(3).path, "train-00001-of-00002:0");
  EXPECT_EQ(dataset.shard_sizes(), (std::vector<uint64_t>{3, 2}));
  const std::vector<int64_t> labels = {1, 1, 0, 2, 0};
  const std::vector<int> order = {0, 1, 2, 3, 4};
  for (size_t i = 0; i < dataset.size(); ++i) {
    EXPECT_EQ(dataset.sample(i).label, labels[i]);
    ASSERT_OK_AND_ASSIGN(const std::string bytes, dataset.ReadSample(i));
    EXPECT_EQ(bytes, jpegs[order[i]]);
  }
  // One file alone, by its path.
  ASSERT_OK_AND_ASSIGN(const Dataset one, Dataset::Open((dir / "train-00001-of-00002").string()));
  EXPECT_EQ(one.size(), 2u);
  // The same records give the same fingerprint wherever they are.
  const std::filesystem::path copy = testing::MakeTempDir("tfrecords-copy");
  std::filesystem::copy(dir / "train-00000-of-00002", copy / "train-00000-of-00002");
  std::filesystem::copy(dir / "train-00001-of-00002", copy / "train-00001-of-00002");
  ASSERT_OK_AND_ASSIGN(const Dataset copied, Dataset::Open(copy.string()));
  EXPECT_EQ(copied.fingerprint(), dataset.fingerprint());
}

TEST(TfRecordTest, DamagedRecordsAreBadSamplesNamingFileAndRecord) {
  const std::filesystem::path dir = testing::MakeTempDir("tfrecords-damaged");
  const std::string good = TfRecordOf(Example(testing::MakeJpeg(32, 32, 1), 3));
  std::string corrupt = TfRecordOf(Example(testing::MakeJpeg(32, 32, 2), 1));
  corrupt[kTfRecordHeaderBytes + 40] ^= 0x55;  // in the data: its checksum fails
  const std::string no_label = TfRecordOf(Example(testing::MakeJpeg(32, 32, 3), -1));
  const std::string cut = TfRecordOf(Example(testing::MakeJpeg(32, 32, 4), 2));
  WriteFile(dir / "part-0", good + corrupt + no_label + good);
  WriteFile(dir / "part-1", good + cut.substr(0, cut.size() / 2));  // a file cut short
  ASSERT_OK_AND_ASSIGN(const Dataset dataset, Dataset::Open(dir.string()));
  ASSERT_EQ(dataset.size(), 6u);
  EXPECT_OK(dataset.ReadSample(0).status());
  const auto damaged = dataset.ReadSample(1);
  EXPECT_TRUE(absl::IsDataLoss(damaged.status())) << damaged.status();
  EXPECT_THAT(damaged.status().message(), HasSubstr("part-0:1"));
  const auto unlabelled = dataset.ReadSample(2);
  EXPECT_THAT(unlabelled.status().message(), HasSubstr("part-0:2: no image/class/label"));
  EXPECT_OK(dataset.ReadSample(3).status());
  const auto truncated = dataset.ReadSample(5);
  EXPECT_TRUE(absl::IsDataLoss(truncated.status())) << truncated.status();
  EXPECT_THAT(truncated.status().message(), HasSubstr("part-1:1"));
  EXPECT_THAT(truncated.status().message(), HasSubstr("cut short"));
}

TEST(TfRecordTest, SegmentationRecordsCarryTheirMasks) {
  const std::filesystem::path dir = testing::MakeTempDir("tfrecords-masks");
  tfrecord::Example example;
  auto& features = *example.mutable_features()->mutable_feature();
  features["image/encoded"].mutable_bytes_list()->add_value("IMAGE");
  features["image/segmentation/class/encoded"].mutable_bytes_list()->add_value("MASK");
  WriteFile(dir / "seg-0", TfRecordOf(example.SerializeAsString()));
  DatasetLimits limits;
  limits.tfrecord.label.clear();
  limits.tfrecord.mask = "image/segmentation/class/encoded";
  ASSERT_OK_AND_ASSIGN(const Dataset dataset, Dataset::Open(dir.string(), limits));
  ASSERT_TRUE(dataset.has_masks());
  ASSERT_OK_AND_ASSIGN(const std::string image, dataset.ReadSample(0));
  ASSERT_OK_AND_ASSIGN(const std::string mask, dataset.ReadMask(0));
  EXPECT_EQ(image, "IMAGE");
  EXPECT_EQ(mask, "MASK");
}

TEST(TfRecordTest, ASavedIndexIsReadInsteadOfTheFilesWhileItMatchesThem) {
  const std::filesystem::path dir = testing::MakeTempDir("tfrecords-index");
  std::string records;
  for (int i = 0; i < 6; ++i) {
    records += TfRecordOf(Example(testing::MakeJpeg(32, 24, i), i % 3));
  }
  WriteFile(dir / "train-00000-of-00001", records);
  ASSERT_OK_AND_ASSIGN(const Dataset indexed, Dataset::Open(dir.string()));
  EXPECT_EQ(indexed.index_location(), (dir / "heterodl-index.pb").string());
  ASSERT_OK_AND_ASSIGN(const std::string index, indexed.SerializeIndex());
  WriteFile(dir / "heterodl-index.pb", index);
  // The index is no TFRecord file of the folder, and gives the same samples.
  ASSERT_OK_AND_ASSIGN(const Dataset from_index, Dataset::Open(dir.string()));
  ASSERT_EQ(from_index.size(), indexed.size());
  EXPECT_EQ(from_index.fingerprint(), indexed.fingerprint());
  for (size_t i = 0; i < indexed.size(); ++i) {
    EXPECT_EQ(from_index.sample(i).path, indexed.sample(i).path);
    EXPECT_EQ(from_index.sample(i).label, indexed.sample(i).label);
    EXPECT_EQ(from_index.sample(i).offset, indexed.sample(i).offset);
    ASSERT_OK_AND_ASSIGN(const std::string bytes, from_index.ReadSample(i));
    EXPECT_EQ(bytes, testing::MakeJpeg(32, 24, static_cast<int>(i)));
  }
  // The index, not the files, is what is read: a file of the same name and
  // size whose records after the first are zeros still gives six samples.
  const std::string first = TfRecordOf(Example(testing::MakeJpeg(32, 24, 0), 0));
  WriteFile(dir / "train-00000-of-00001", first + std::string(records.size() - first.size(), '\0'));
  ASSERT_OK_AND_ASSIGN(const Dataset blind, Dataset::Open(dir.string()));
  EXPECT_EQ(blind.size(), 6u);
  EXPECT_TRUE(absl::IsDataLoss(blind.ReadSample(1).status()));
  DatasetLimits fresh;
  fresh.ignore_saved_index = true;  // what `heterodl dataset index` does
  ASSERT_OK_AND_ASSIGN(const Dataset reindexed, Dataset::Open(dir.string(), fresh));
  EXPECT_EQ(reindexed.size(), 1u);  // the rest cannot be framed
  // A file that changed (a record appended) is indexed again.
  WriteFile(dir / "train-00000-of-00001", records + TfRecordOf(Example("x", 1)));
  ASSERT_OK_AND_ASSIGN(const Dataset grown, Dataset::Open(dir.string()));
  EXPECT_EQ(grown.size(), 7u);
  // Other keys, another index: not used.
  WriteFile(dir / "train-00000-of-00001", records);
  DatasetLimits offset;
  offset.tfrecord.label_offset = -10;
  ASSERT_OK_AND_ASSIGN(const Dataset shifted, Dataset::Open(dir.string(), offset));
  EXPECT_EQ(shifted.sample(0).label, 10);
}

TEST(TfRecordTest, WhatIsNoRecordFileIsNotTakenForOne) {
  const std::filesystem::path dir = testing::MakeTempDir("tfrecords-mixed");
  WriteFile(dir / "list.txt", "a.jpg\t0\n");
  WriteFile(dir / "records", TfRecordOf(Example("x", 0)));
  // A folder holding something else is not a TFRecord dataset (nor an
  // image folder: no class folders).
  EXPECT_FALSE(Dataset::Open(dir.string()).ok());
  // A file whose first bytes are no record header is a file list.
  const auto list = Dataset::Open((dir / "list.txt").string());
  EXPECT_THAT(list.status().message(), ::testing::Not(HasSubstr("TFRecord")));
}

}  // namespace
}  // namespace heterodl
