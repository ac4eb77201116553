#include "src/data/sample_dataset.h"

#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "augment/image_format.h"
#include "augment/png_decoder.h"
#include "gtest/gtest.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"
#include "src/common/read_file.h"
#include "src/data/dataset.h"
#include "tests/testing/status_testing.h"
#include "tests/testing/test_images.h"

namespace heterodl {
namespace {

namespace fs = std::filesystem;

TEST(SampleFormatsTest, ParsesSharesNamesAndMixed) {
  ASSERT_OK_AND_ASSIGN(std::vector<SampleFormatShare> mixed, ParseSampleFormats("mixed"));
  ASSERT_EQ(mixed.size(), 5u);
  EXPECT_EQ(mixed[0].format, SampleFormat::kJpeg);
  EXPECT_EQ(mixed[0].percent, 60);
  ASSERT_OK_AND_ASSIGN(std::vector<SampleFormatShare> png, ParseSampleFormats("png"));
  ASSERT_EQ(png.size(), 1u);
  EXPECT_EQ(png[0].format, SampleFormat::kPng);
  EXPECT_EQ(png[0].percent, 100);
  ASSERT_OK_AND_ASSIGN(std::vector<SampleFormatShare> two, ParseSampleFormats("webp=30,jpeg=70"));
  EXPECT_EQ(two[0].format, SampleFormat::kWebp);
  EXPECT_EQ(two[1].percent, 70);
}

TEST(SampleFormatsTest, ErrorsSayWhatIsWrong) {
  const auto error = [](absl::string_view text) {
    return std::string(ParseSampleFormats(text).status().message());
  };
  EXPECT_NE(error("jpg").find("unknown format 'jpg'"), std::string::npos) << error("jpg");
  EXPECT_NE(error("png=50,jpeg=40").find("sum to 90"), std::string::npos);
  EXPECT_NE(error("png=x,jpeg=100").find("percentage"), std::string::npos);
  EXPECT_NE(error("png=50,png=50").find("twice"), std::string::npos);
  EXPECT_NE(error("png=0,jpeg=100").find("percentage"), std::string::npos);
  EXPECT_FALSE(ParseSampleFormats("").ok());
}

// A folder with two synthetic "photos" to cut the dataset from.
fs::path MakeSourcePhotos() {
  fs::path dir = testing::MakeTempDir("sample-sources");
  for (const char* name : {"alpha.jpg", "beta.jpg"}) {
    cv::Mat photo(480, 640, CV_8UC3);
    cv::randu(photo, cv::Scalar::all(0), cv::Scalar::all(255));
    cv::imwrite((dir / name).string(), photo);
  }
  return dir;
}

TEST(SampleDatasetTest, MixedFormatsHoldExactlyTheirShares) {
  SampleDatasetOptions options;
  options.source_dir = MakeSourcePhotos().string();
  options.output_dir = (testing::MakeTempDir("sample-mixed") / "out").string();
  options.num_images = 100;
  ASSERT_OK_AND_ASSIGN(options.formats, ParseSampleFormats("mixed"));
  ASSERT_OK(WriteSampleDataset(options));
  std::map<std::string, int> kinds;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(options.output_dir)) {
    if (!entry.is_regular_file() || entry.path().filename().string()[0] == '.') {
      continue;
    }
    ASSERT_OK_AND_ASSIGN(const std::string bytes, ReadFileToString(entry.path().string()));
    const std::string kind = ImageKindName(bytes);
    ++kinds[kind];
    const std::string extension = entry.path().extension().string();
    EXPECT_EQ(extension, kind == "PNG" ? ".png" : kind == "WebP" ? ".webp" : ".jpg") << kind;
  }
  EXPECT_EQ(kinds, (std::map<std::string, int>{{"baseline JPEG", 60},
                                               {"grayscale JPEG", 10},
                                               {"progressive JPEG", 10},
                                               {"PNG", 10},
                                               {"WebP", 10}}));
  // The same options again: up to date, nothing rewritten; other formats are
  // another dataset, refused without --overwrite.
  ASSERT_OK(WriteSampleDataset(options));
  options.formats = {{SampleFormat::kPng, 100}};
  EXPECT_TRUE(absl::IsAlreadyExists(WriteSampleDataset(options)));
}

TEST(SampleDatasetTest, ASegmentationSampleIsImagesWithTheirMasks) {
  SampleDatasetOptions options;
  options.source_dir = MakeSourcePhotos().string();
  options.output_dir = (testing::MakeTempDir("sample-segmentation") / "out").string();
  options.num_images = 12;
  options.task = SampleTask::kSegmentation;
  ASSERT_OK(WriteSampleDataset(options));
  // A dataset heterodl reads as one: images paired with masks by stem.
  ASSERT_OK_AND_ASSIGN(const Dataset dataset, Dataset::Open(options.output_dir));
  ASSERT_EQ(dataset.size(), 12u);
  ASSERT_TRUE(dataset.has_masks());
  std::set<int> classes;
  for (size_t i = 0; i < dataset.size(); ++i) {
    ASSERT_OK_AND_ASSIGN(const std::string mask_bytes, dataset.ReadMask(i));
    ASSERT_OK_AND_ASSIGN(const cv::Mat mask, DecodePngMask(mask_bytes, 1 << 24));
    ASSERT_OK_AND_ASSIGN(const std::string image_bytes, dataset.ReadSample(i));
    const cv::Mat image = cv::imdecode(std::vector<uint8_t>(image_bytes.begin(), image_bytes.end()),
                                       cv::IMREAD_COLOR);
    EXPECT_EQ(mask.size(), image.size()) << i;
    for (int y = 0; y < mask.rows; ++y) {
      for (int x = 0; x < mask.cols; ++x) {
        classes.insert(mask.at<uint8_t>(y, x));
      }
    }
  }
  EXPECT_EQ(classes, (std::set<int>{0, 1, 2, 3}));  // background and the three shapes
  // Named as the masks number them (classes.txt beside them).
  EXPECT_EQ(dataset.class_names(),
            (std::vector<std::string>{"background", "rectangle", "ellipse", "triangle"}));
  ASSERT_OK(WriteSampleDataset(options));      // up to date
  options.task = SampleTask::kClassification;  // another dataset
  EXPECT_TRUE(absl::IsAlreadyExists(WriteSampleDataset(options)));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseSampleTask("keypoints").status()));
}

TEST(SampleDatasetTest, ADetectionSampleIsTheSegmentationImagesWithEachShapesBox) {
  const std::string photos = MakeSourcePhotos().string();
  SampleDatasetOptions options;
  options.source_dir = photos;
  options.num_images = 10;
  options.output_dir = (testing::MakeTempDir("sample-detection") / "out").string();
  options.task = SampleTask::kDetection;
  ASSERT_OK(WriteSampleDataset(options));
  SampleDatasetOptions twin = options;
  twin.output_dir = (testing::MakeTempDir("sample-detection-twin") / "out").string();
  twin.task = SampleTask::kSegmentation;
  ASSERT_OK(WriteSampleDataset(twin));
  ASSERT_OK_AND_ASSIGN(const Dataset detection,
                       Dataset::Open(options.output_dir + "/annotations.json"));
  ASSERT_OK_AND_ASSIGN(const Dataset segmentation, Dataset::Open(twin.output_dir));
  ASSERT_TRUE(detection.has_boxes());
  ASSERT_EQ(detection.size(), 10u);
  EXPECT_EQ(detection.class_names(),
            (std::vector<std::string>{"__background__", "rectangle", "ellipse", "triangle"}));
  size_t objects = 0;
  for (size_t i = 0; i < detection.size(); ++i) {
    // The same image as the segmentation sample's, and each of its classes'
    // pixels inside the union of that class's boxes.
    ASSERT_OK_AND_ASSIGN(const std::string image, detection.ReadSample(i));
    ASSERT_OK_AND_ASSIGN(const std::string same, segmentation.ReadSample(i));
    EXPECT_EQ(image, same) << i;
    ASSERT_OK_AND_ASSIGN(const std::string mask_bytes, segmentation.ReadMask(i));
    ASSERT_OK_AND_ASSIGN(const cv::Mat mask, DecodePngMask(mask_bytes, 1 << 24));
    const Sample& sample = detection.sample(i);
    objects += sample.boxes.size();
    for (int y = 0; y < mask.rows; ++y) {
      for (int x = 0; x < mask.cols; ++x) {
        const int id = mask.at<uint8_t>(y, x);
        if (id == 0) {
          continue;
        }
        bool inside = false;
        for (size_t b = 0; b < sample.boxes.size() && !inside; ++b) {
          const Box& box = sample.boxes[b];
          inside = sample.box_labels[b] == id && x >= box.x1 && x + 1 <= box.x2 && y >= box.y1 &&
                   y + 1 <= box.y2;
        }
        ASSERT_TRUE(inside) << "sample " << i << ": pixel " << x << "," << y << " of class " << id
                            << " in none of its boxes";
      }
    }
  }
  EXPECT_GE(objects, 10u);  // one to three shapes an image
}

TEST(SampleDatasetTest, ASampleSizeMakesEveryImageAndMaskThatSize) {
  ASSERT_OK_AND_ASSIGN(const auto street, ParseSampleImageSize("96x192"));
  EXPECT_EQ(street, std::make_pair(96, 192));  // height first, as pipeline sizes
  ASSERT_OK_AND_ASSIGN(const auto varied, ParseSampleImageSize(""));
  EXPECT_EQ(varied, std::make_pair(0, 0));
  for (const char* bad : {"96", "96x", "x96", "8x96", "96x99999", "axb", "96x192x3"}) {
    const absl::Status status = ParseSampleImageSize(bad).status();
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << bad;
    EXPECT_NE(status.message().find("--sample-size"), std::string::npos) << status;
  }
  SampleDatasetOptions options;
  options.source_dir = MakeSourcePhotos().string();
  options.output_dir = (testing::MakeTempDir("sample-sized") / "out").string();
  options.num_images = 5;
  options.task = SampleTask::kSegmentation;
  options.height = street.first;
  options.width = street.second;
  ASSERT_OK(WriteSampleDataset(options));
  ASSERT_OK_AND_ASSIGN(const Dataset dataset, Dataset::Open(options.output_dir));
  for (size_t i = 0; i < dataset.size(); ++i) {
    ASSERT_OK_AND_ASSIGN(const std::string mask_bytes, dataset.ReadMask(i));
    ASSERT_OK_AND_ASSIGN(const cv::Mat mask, DecodePngMask(mask_bytes, 1 << 24));
    EXPECT_EQ(mask.size(), cv::Size(192, 96)) << i;
  }
  // Another size is another dataset.
  options.width = 200;
  EXPECT_TRUE(absl::IsAlreadyExists(WriteSampleDataset(options)));
}

}  // namespace
}  // namespace heterodl
