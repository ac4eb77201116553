#include "src/data/dataset.h"

#include "gtest/gtest.h"
#include "tests/testing/test_images.h"

namespace heterodl {
namespace {

using ::heterodl::testing::MakeImageFolder;
using ::heterodl::testing::MakeTempDir;
using ::heterodl::testing::WriteFile;

TEST(DatasetTest, ImageFolderSortsClassesAndFiles) {
  std::filesystem::path root = MakeImageFolder("folder", 3, 4);
  absl::StatusOr<Dataset> dataset = Dataset::Open(root.string());
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->size(), 12u);
  EXPECT_EQ(dataset->class_names(), (std::vector<std::string>{"class0", "class1", "class2"}));
  EXPECT_EQ(dataset->sample(0).path, "class0/img0.jpg");
  EXPECT_EQ(dataset->sample(11).label, 2);
  absl::StatusOr<std::string> bytes = dataset->ReadSample(5);
  ASSERT_TRUE(bytes.ok());
  EXPECT_GT(bytes->size(), 100u);
}

TEST(DatasetTest, FingerprintDependsOnContentsListNotLocation) {
  std::filesystem::path a = MakeImageFolder("fp_a", 2, 3);
  std::filesystem::path b = MakeImageFolder("fp_b", 2, 3);
  std::filesystem::path c = MakeImageFolder("fp_c", 2, 4);
  EXPECT_EQ(Dataset::Open(a.string())->fingerprint(), Dataset::Open(b.string())->fingerprint());
  EXPECT_NE(Dataset::Open(a.string())->fingerprint(), Dataset::Open(c.string())->fingerprint());
}

TEST(DatasetTest, FileList) {
  std::filesystem::path root = MakeImageFolder("list", 1, 2);
  WriteFile(root / "train.tsv", "# comment\nclass0/img0.jpg\t3\nclass0/img1.jpg\t1\n");
  absl::StatusOr<Dataset> dataset = Dataset::Open((root / "train.tsv").string());
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->size(), 2u);
  EXPECT_EQ(dataset->sample(0).label, 3);
  EXPECT_EQ(dataset->class_names().size(), 4u);
  EXPECT_TRUE(dataset->ReadSample(1).ok());
}

TEST(DatasetTest, FileListReportsItsMissingFiles) {
  std::filesystem::path root = MakeImageFolder("holes", 1, 2);
  std::string list = "class0/img0.jpg\t0\n";
  for (int i = 0; i < 7; ++i) {
    list += "gone/img" + std::to_string(i) + ".jpg\t1\n";
  }
  list += root.string() + "/class0/img1.jpg\t0\n";  // absolute paths count too
  WriteFile(root / "train.tsv", list);
  absl::StatusOr<Dataset> dataset = Dataset::Open((root / "train.tsv").string());
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  const Dataset::MissingFiles missing = dataset->FindMissingFiles(3);
  EXPECT_EQ(missing.count, 7u);
  EXPECT_EQ(missing.first,
            (std::vector<std::string>{"gone/img0.jpg", "gone/img1.jpg", "gone/img2.jpg"}));
  EXPECT_EQ(Dataset::Open(root.string())->FindMissingFiles().count, 0u);
}

TEST(DatasetTest, MalformedFileListNamesTheLine) {
  std::filesystem::path root = MakeTempDir("badlist");
  WriteFile(root / "train.tsv", "a.jpg\t1\nb.jpg no-tab\n");
  absl::StatusOr<Dataset> dataset = Dataset::Open((root / "train.tsv").string());
  ASSERT_FALSE(dataset.ok());
  EXPECT_NE(dataset.status().message().find("line 2"), std::string::npos) << dataset.status();
}

TEST(DatasetTest, MissingAndEmptyAreClearErrors) {
  absl::StatusOr<Dataset> missing = Dataset::Open("/nonexistent/heterodl");
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_NE(missing.status().message().find("/nonexistent/heterodl"), std::string::npos);
  std::filesystem::path empty = MakeTempDir("empty");
  EXPECT_TRUE(absl::IsFailedPrecondition(Dataset::Open(empty.string()).status()));
}

TEST(DatasetTest, ReadSampleOfMissingFileNamesIt) {
  std::filesystem::path root = MakeImageFolder("vanish", 1, 2);
  absl::StatusOr<Dataset> dataset = Dataset::Open(root.string());
  std::filesystem::remove(root / "class0" / "img1.jpg");
  absl::StatusOr<std::string> bytes = dataset->ReadSample(1);
  ASSERT_FALSE(bytes.ok());
  EXPECT_NE(bytes.status().message().find("img1.jpg"), std::string::npos);
  EXPECT_TRUE(absl::IsOutOfRange(dataset->ReadSample(99).status()));
}

}  // namespace
}  // namespace heterodl
