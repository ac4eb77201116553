#include "src/data/dataset.h"

#include <sys/stat.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
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
  EXPECT_TRUE(dataset->shard_sizes().empty());  // no shards: no block-shuffled plan
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

TEST(DatasetTest, ANonRegularFileIsABadSampleNotAHang) {
  std::filesystem::path root = MakeImageFolder("fifo", 1, 1);
  const std::filesystem::path fifo = root / "fifo.jpg";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);  // no writer: an open that blocks would never end
  WriteFile(root / "train.tsv", "class0/img0.jpg\t0\nfifo.jpg\t0\n/dev/zero\t0\nclass0\t0\n");
  absl::StatusOr<Dataset> dataset = Dataset::Open((root / "train.tsv").string());
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_TRUE(dataset->ReadSample(0).ok());
  for (const auto& [index, kind] : {std::pair<size_t, std::string>{1, "a FIFO"},
                                    {2, "a character device"},
                                    {3, "a directory"}}) {
    const absl::StatusOr<std::string> read = dataset->ReadSample(index);
    EXPECT_TRUE(absl::IsFailedPrecondition(read.status())) << read.status();
    EXPECT_NE(read.status().message().find(kind), std::string::npos) << read.status();
  }
  EXPECT_EQ(dataset->FindMissingFiles().count, 3u);
  // A list that is itself a FIFO is refused at start, not waited on.
  const std::filesystem::path list_fifo = root / "list.tsv";
  ASSERT_EQ(::mkfifo(list_fifo.c_str(), 0600), 0);
  const absl::StatusOr<Dataset> from_fifo = Dataset::Open(list_fifo.string());
  EXPECT_TRUE(absl::IsFailedPrecondition(from_fifo.status())) << from_fifo.status();
}

TEST(DatasetTest, AFileOverTheLimitIsRefusedBeforeItIsRead) {
  std::filesystem::path root = MakeImageFolder("limit", 1, 1);
  const uint64_t size = std::filesystem::file_size(root / "class0" / "img0.jpg");
  absl::StatusOr<Dataset> tight = Dataset::Open(root.string(), DatasetLimits{size - 1});
  ASSERT_TRUE(tight.ok()) << tight.status();
  const absl::StatusOr<std::string> refused = tight->ReadSample(0);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("more than the limit of"), std::string::npos);
  absl::StatusOr<Dataset> exact = Dataset::Open(root.string(), DatasetLimits{size});
  ASSERT_TRUE(exact.ok()) << exact.status();
  ASSERT_TRUE(exact->ReadSample(0).ok());
  EXPECT_EQ(exact->ReadSample(0)->size(), size);
}

TEST(DatasetTest, AHugeLabelIsRefusedNotAllocated) {
  std::filesystem::path root = MakeImageFolder("huge_label", 1, 1);
  WriteFile(root / "train.tsv", "class0/img0.jpg\t99999999999\n");
  const absl::StatusOr<Dataset> dataset = Dataset::Open((root / "train.tsv").string());
  ASSERT_FALSE(dataset.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(dataset.status()));
  EXPECT_NE(dataset.status().message().find("line 1: label 99999999999 is over the largest"),
            std::string::npos)
      << dataset.status();
  WriteFile(root / "train.tsv", absl::StrCat("class0/img0.jpg\t", kMaxLabel, "\n"));
  const absl::StatusOr<Dataset> largest = Dataset::Open((root / "train.tsv").string());
  ASSERT_TRUE(largest.ok()) << largest.status();
  EXPECT_EQ(largest->class_names().size(), static_cast<size_t>(kMaxLabel) + 1);
}

TEST(DatasetTest, ARootConfinesTheFilesAListMayName) {
  std::filesystem::path root = MakeImageFolder("confined", 1, 2);
  std::filesystem::path outside = MakeImageFolder("outside", 1, 1);
  const std::string inside_list = (root / "train.tsv").string();
  DatasetLimits limits;
  limits.root = root.string();
  // Inside, relative or absolute: read as usual.
  WriteFile(root / "train.tsv",
            "class0/img0.jpg\t0\n" + (root / "class0/img1.jpg").string() + "\t1\n");
  absl::StatusOr<Dataset> dataset = Dataset::Open(inside_list, limits);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_TRUE(dataset->ReadSample(0).ok());
  EXPECT_TRUE(dataset->ReadSample(1).ok());
  // "../" and an absolute path elsewhere are refused at start.
  for (const std::string& escape :
       {std::string("../") + outside.filename().string() + "/class0/img0.jpg",
        (outside / "class0/img0.jpg").string()}) {
    WriteFile(root / "train.tsv", "class0/img0.jpg\t0\n" + escape + "\t0\n");
    const absl::StatusOr<Dataset> escaping = Dataset::Open(inside_list, limits);
    ASSERT_FALSE(escaping.ok()) << escape;
    EXPECT_NE(escaping.status().message().find("lies outside --dataset-root"), std::string::npos)
        << escaping.status();
    // Without a root the same list is served.
    EXPECT_TRUE(Dataset::Open(inside_list).ok());
  }
  // A symlink inside that leads out is a bad sample, refused as it is opened.
  std::filesystem::create_symlink(outside / "class0" / "img0.jpg", root / "class0" / "link.jpg");
  WriteFile(root / "train.tsv", "class0/img0.jpg\t0\nclass0/link.jpg\t0\n");
  dataset = Dataset::Open(inside_list, limits);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  const absl::StatusOr<std::string> linked = dataset->ReadSample(1);
  EXPECT_TRUE(absl::IsPermissionDenied(linked.status())) << linked.status();
  EXPECT_TRUE(Dataset::Open(inside_list)->ReadSample(1).ok());  // no root: followed
}

TEST(DatasetTest, ASegmentationListPairsImagesWithMasks) {
  std::filesystem::path root = MakeImageFolder("seg_list", 1, 2);
  WriteFile(root / "m0.png", "mask 0");
  WriteFile(root / "m1.png", "mask 1");
  WriteFile(root / "seg.tsv", "class0/img0.jpg\tm0.png\nclass0/img1.jpg\tm1.png\n");
  absl::StatusOr<Dataset> dataset = Dataset::Open((root / "seg.tsv").string());
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_TRUE(dataset->has_masks());
  ASSERT_EQ(dataset->size(), 2u);
  EXPECT_EQ(dataset->sample(1).mask_path, "m1.png");
  EXPECT_TRUE(dataset->class_names().empty());  // no mask decodes, and no classes.txt
  EXPECT_EQ(*dataset->ReadMask(1), "mask 1");
  EXPECT_TRUE(dataset->ReadSample(1).ok());
  // The masks are part of what the fingerprint says.
  WriteFile(root / "swapped.tsv", "class0/img0.jpg\tm1.png\nclass0/img1.jpg\tm0.png\n");
  EXPECT_NE(Dataset::Open((root / "swapped.tsv").string())->fingerprint(), dataset->fingerprint());
  // A missing mask is reported with the missing images.
  WriteFile(root / "holes.tsv", "class0/img0.jpg\tgone.png\n");
  const Dataset::MissingFiles missing =
      Dataset::Open((root / "holes.tsv").string())->FindMissingFiles();
  EXPECT_EQ(missing.count, 1u);
  EXPECT_EQ(missing.first, std::vector<std::string>{"gone.png"});
  // A classification dataset has none.
  EXPECT_FALSE(Dataset::Open(root.string())->has_masks());
  EXPECT_TRUE(absl::IsFailedPrecondition(Dataset::Open(root.string())->ReadMask(0).status()));
}

TEST(DatasetTest, AListIsAllLabelsOrAllMasks) {
  std::filesystem::path root = MakeImageFolder("seg_mixed", 1, 2);
  WriteFile(root / "mixed.tsv", "class0/img0.jpg\tm0.png\nclass0/img1.jpg\t1\n");
  absl::Status status = Dataset::Open((root / "mixed.tsv").string()).status();
  EXPECT_TRUE(absl::IsInvalidArgument(status));
  EXPECT_NE(status.message().find("line 2: a label (1) in a list of masks"), std::string::npos)
      << status;
  WriteFile(root / "mixed2.tsv", "class0/img0.jpg\t1\nclass0/img1.jpg\tm1.png\n");
  status = Dataset::Open((root / "mixed2.tsv").string()).status();
  EXPECT_NE(status.message().find("line 2: a mask path ('m1.png') in a list of labels"),
            std::string::npos)
      << status;
  // A label too large for int64 is still a label, refused, not a path.
  WriteFile(root / "huge.tsv", "class0/img0.jpg\t99999999999999999999999\n");
  status = Dataset::Open((root / "huge.tsv").string()).status();
  EXPECT_NE(status.message().find("over the largest label"), std::string::npos) << status;
}

TEST(DatasetTest, ASegmentationFolderMatchesImagesAndMasksByStem) {
  const std::filesystem::path root = std::filesystem::temp_directory_path() / "heterodl_seg_folder";
  std::filesystem::remove_all(root);
  WriteFile(root / "images" / "b.jpg", "image b");
  WriteFile(root / "images" / "a.png", "image a");
  WriteFile(root / "masks" / "a.png", "mask a");
  WriteFile(root / "masks" / "b.png", "mask b");
  absl::StatusOr<Dataset> dataset = Dataset::Open(root.string());
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  ASSERT_EQ(dataset->size(), 2u);
  EXPECT_TRUE(dataset->has_masks());
  EXPECT_EQ(dataset->sample(0).path, "images/a.png");  // sorted
  EXPECT_EQ(*dataset->ReadMask(0), "mask a");
  EXPECT_EQ(*dataset->ReadMask(1), "mask b");
  // An image without its mask is named.
  WriteFile(root / "images" / "c.jpg", "image c");
  const absl::Status status = Dataset::Open(root.string()).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_NE(status.message().find("'c.jpg' has no mask (expected masks/c.png)"), std::string::npos)
      << status;
}

TEST(DatasetTest, ASegmentationDatasetsClassesComeFromItsMasksOrItsClassesFile) {
  // Masks of ids 0 (background) to 3, as the sample dataset draws them.
  const std::filesystem::path root =
      ::heterodl::testing::MakePaintedSegmentationFolder("seg_classes", 12, 4);
  absl::StatusOr<Dataset> dataset = Dataset::Open(root.string());
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->class_names(), (std::vector<std::string>{"0", "1", "2", "3"}));
  // 16-bit masks' ids are read as they are; the ignore index is no class.
  const std::filesystem::path wide = ::heterodl::testing::MakePaintedSegmentationFolder(
      "seg_classes16", 4, 4, /*sixteen_bit=*/true);
  DatasetLimits limits;
  limits.mask_ignore_index = 3000;  // class 3, scaled: left out
  dataset = Dataset::Open(wide.string(), limits);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->class_names().size(), 2001u);
  // A classes.txt beside it names them, and the names are in the fingerprint.
  const uint64_t unnamed = Dataset::Open(root.string())->fingerprint();
  WriteFile(root / "classes.txt", "background\nrectangle\nellipse\ntriangle\n");
  dataset = Dataset::Open(root.string());
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->class_names(),
            (std::vector<std::string>{"background", "rectangle", "ellipse", "triangle"}));
  EXPECT_NE(dataset->fingerprint(), unnamed);
  WriteFile(root / "classes.txt", "\n\n");
  EXPECT_TRUE(absl::IsInvalidArgument(Dataset::Open(root.string()).status()));
}

TEST(DatasetTest, ARootConfinesMasksToo) {
  std::filesystem::path root = MakeImageFolder("seg_confined", 1, 1);
  WriteFile(root / "seg.tsv", "class0/img0.jpg\t../outside.png\n");
  const absl::Status status =
      Dataset::Open((root / "seg.tsv").string(), {uint64_t{1} << 20, root.string()}).status();
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_NE(status.message().find("lies outside --dataset-root"), std::string::npos) << status;
}

// A COCO instances file as torchvision's CocoDetection reads it.
constexpr char kCocoJson[] = R"({
  "info": {"description": "ignored"},
  "images": [{"id": 9, "file_name": "c.jpg", "width": 40, "height": 30},
             {"id": 2, "file_name": "a.jpg", "width": 40, "height": 30, "license": 1},
             {"id": 5, "file_name": "sub/b.jpg", "width": 40, "height": 30}],
  "annotations": [
    {"id": 1, "image_id": 2, "category_id": 3, "bbox": [1.5, 2, 10, 20], "iscrowd": 0,
     "area": 200, "segmentation": [[1, 2, 3, 4]]},
    {"id": 2, "image_id": 2, "category_id": 1, "bbox": [0, 0, 4, 4], "iscrowd": 1,
     "segmentation": {"counts": [1, 2], "size": [30, 40]}},
    {"id": 3, "image_id": 9, "category_id": 1, "bbox": [5, 5, 0, 3], "iscrowd": 0}],
  "categories": [{"id": 1, "name": "cat"}, {"id": 3, "name": "dog"}]
})";

TEST(CocoTest, AnInstancesFileIsOneSampleAnImageInIdOrderWithItsBoxes) {
  const std::filesystem::path root = MakeTempDir("coco");
  WriteFile(root / "annotations.json", kCocoJson);
  absl::StatusOr<Dataset> dataset = Dataset::Open((root / "annotations.json").string());
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_TRUE(dataset->has_boxes());
  EXPECT_FALSE(dataset->has_masks());
  ASSERT_EQ(dataset->size(), 3u);
  EXPECT_EQ(dataset->sample(0).path, "a.jpg");
  EXPECT_EQ(dataset->sample(1).path, "sub/b.jpg");
  EXPECT_EQ(dataset->sample(2).path, "c.jpg");
  // By category id, as detection models take labels.
  // COCO's ids, never an empty name: torchvision's names for the gaps.
  EXPECT_EQ(dataset->class_names(),
            (std::vector<std::string>{"__background__", "cat", "N/A", "dog"}));
  const Sample& a = dataset->sample(0);
  ASSERT_EQ(a.boxes.size(), 2u);
  EXPECT_EQ(a.boxes[0].x1, 1.5f);
  EXPECT_EQ(a.boxes[0].y1, 2.0f);
  EXPECT_EQ(a.boxes[0].x2, 11.5f);  // xywh -> xyxy
  EXPECT_EQ(a.boxes[0].y2, 22.0f);
  EXPECT_EQ(a.box_labels, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(a.crowd, (std::vector<uint8_t>{0, 1}));
  EXPECT_TRUE(dataset->sample(1).boxes.empty());  // an image without objects is a sample
  EXPECT_TRUE(dataset->sample(1).detection);
  // Images are read from the file's folder, or from the image root.
  WriteFile(root / "a.jpg", "bytes of a");
  absl::StatusOr<std::string> bytes = dataset->ReadSample(0);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, "bytes of a");
  const std::filesystem::path images = MakeTempDir("coco-images");
  WriteFile(images / "a.jpg", "elsewhere");
  DatasetLimits limits;
  limits.image_root = images.string();
  absl::StatusOr<Dataset> moved = Dataset::Open((root / "annotations.json").string(), limits);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved->ReadSample(0), "elsewhere");
  // The boxes are part of the fingerprint.
  std::string changed = kCocoJson;
  changed.replace(changed.find("[1.5, 2, 10, 20]"), 16, "[1.5, 2, 10, 21]");
  WriteFile(root / "changed.json", changed);
  absl::StatusOr<Dataset> other = Dataset::Open((root / "changed.json").string());
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(other->fingerprint(), dataset->fingerprint());
}

TEST(CocoTest, AMalformedInstancesFileSaysWhatIsWrong) {
  const std::filesystem::path root = MakeTempDir("coco-bad");
  const std::pair<std::string, std::string> cases[] = {
      {"not json", "not a COCO instances file"},
      {R"({"images": []})", "no images"},
      {R"({"images": [{"id": 1, "file_name": "a"}, {"id": 1, "file_name": "b"}]})",
       "image id 1 given twice"},
      {R"({"images": [{"id": 1, "file_name": "a"}], "categories": [{"id": 1}],
           "annotations": [{"id": 7, "image_id": 2, "category_id": 1, "bbox": [0, 0, 1, 1]}]})",
       "annotation 7 is of image 2"},
      {R"({"images": [{"id": 1, "file_name": "a"}], "categories": [{"id": 1}],
           "annotations": [{"id": 7, "image_id": 1, "category_id": 4, "bbox": [0, 0, 1, 1]}]})",
       "annotation 7 is of category 4"},
      {R"({"images": [{"id": 1, "file_name": "a"}], "categories": [{"id": 1}],
           "annotations": [{"id": 7, "image_id": 1, "category_id": 1, "bbox": [0, 0, -1, 1]}]})",
       "annotation 7: bbox"},
      {R"({"images": [{"id": 1, "file_name": "a"}], "categories": [{"id": 1}],
           "annotations": [{"id": 7, "image_id": 1, "category_id": 1, "bbox": [0, 0, 1]}]})",
       "annotation 7: bbox"},
      {R"({"images": [{"id": 1, "file_name": "a"}], "categories": [{"id": 1}],
           "annotations": [{"id": 7, "image_id": 1, "category_id": 1, "bbox": [0, 0, 1, 1],
                            "iscrowd": 2}]})",
       "iscrowd 2"},
      {R"({"images": [{"id": 1, "file_name": "a"}], "categories": [{"id": 99999999}]})",
       "category id 99999999"},
  };
  for (const auto& [json, expected] : cases) {
    WriteFile(root / "bad.json", json);
    const absl::Status status = Dataset::Open((root / "bad.json").string()).status();
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << json << ": " << status;
    EXPECT_NE(status.message().find(expected), std::string::npos) << status;
    EXPECT_NE(status.message().find("bad.json"), std::string::npos) << status;
  }
}

}  // namespace
}  // namespace heterodl
