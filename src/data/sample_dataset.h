// The built-in sample dataset: an ImageNet-layout folder of photo JPEGs cut
// from the real photographs of Debian's mate-backgrounds package, so that
// benchmarks and the demo decode photo-like data without any download.
//
//   SampleDatasetOptions options;
//   options.output_dir = "data/sample";
//   options.num_images = 512;
//   RETURN_IF_ERROR(WriteSampleDataset(options));
//
// One class per source photo; each image is a random crop of its photo,
// resized to 300-600 px wide and encoded in one of `formats` (by default all
// baseline JPEG, quality 85-95). The output is a pure function of (source
// photos, num_images, seed, formats).
//
// `formats` makes the mixed sets web-scraped data looks like, for the
// per-format benchmark (docs/benchmarks.md):
//
//   heterodl dataset sample data/mixed --images 2000 --formats mixed
#ifndef HETERODL_SRC_DATA_SAMPLE_DATASET_H_
#define HETERODL_SRC_DATA_SAMPLE_DATASET_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace heterodl {

// How a sample image is encoded.
enum class SampleFormat {
  kJpeg,             // baseline, colour, quality 85-95
  kGrayscaleJpeg,    // baseline, one channel
  kProgressiveJpeg,  // colour, progressive scans
  kPng,              // 8-bit RGB, zlib level 6 (what PIL and libpng write)
  kWebp,             // lossy, quality 80-95
};

// The name written in --formats, e.g. "progressive".
absl::string_view SampleFormatName(SampleFormat format);

struct SampleFormatShare {
  SampleFormat format = SampleFormat::kJpeg;
  int percent = 100;
};

// Parses --formats: a list like "jpeg=60,progressive=10,png=30" whose
// percentages sum to 100, a single name ("png": all of it), or "mixed"
// (jpeg=60, grayscale=10, progressive=10, png=10, webp=10). Names: jpeg,
// grayscale, progressive, png, webp. InvalidArgument naming the problem.
absl::StatusOr<std::vector<SampleFormatShare>> ParseSampleFormats(absl::string_view text);

// What the sample is for.
enum class SampleTask {
  kClassification,  // OUT/CLASS/IMAGE: one class per source photo
  // OUT/images/NAME.jpg + OUT/masks/NAME.png: a photo crop (class 0) with
  // one to three shapes drawn on it, each a class (1 rectangle, 2 ellipse,
  // 3 triangle) in a random colour; the mask holds the ids, 8-bit gray.
  kSegmentation,
  // OUT/images/NAME.jpg + OUT/annotations.json (COCO instances): the same
  // images with their shapes as objects, each shape's box and category
  // (1 rectangle, 2 ellipse, 3 triangle).
  kDetection,
};

// Parses --task: "classification", "segmentation" or "detection".
absl::StatusOr<SampleTask> ParseSampleTask(absl::string_view text);

// Parses --sample-size: "" (0x0: sizes vary) or HxW, each side 16 to 16384;
// returns {height, width}.
absl::StatusOr<std::pair<int, int>> ParseSampleImageSize(absl::string_view text);

struct SampleDatasetOptions {
  std::string output_dir;
  SampleTask task = SampleTask::kClassification;
  int num_images = 512;
  uint64_t seed = 0;
  // Folder searched (recursively) for source photos (*.jpg).
  std::string source_dir = "/usr/share/backgrounds/mate";
  // Shares of the images per format, interleaved over the images (every 100
  // consecutive images hold exactly these percentages).
  std::vector<SampleFormatShare> formats = {{SampleFormat::kJpeg, 100}};
  // Both > 0: every image exactly this size (a crop of the photo's aspect,
  // resized), as street scenes of 2048x1024 for a segmentation benchmark;
  // else 300-600 px wide, of the crop's aspect.
  int width = 0;
  int height = 0;
  // Replace whatever output_dir holds. Without it, anything there but this
  // very dataset (same options) is refused: a dataset is not silently lost.
  bool overwrite = false;
};

// Writes the dataset, or does nothing when output_dir already holds it (same
// options). FailedPrecondition when no source photos are found (install
// mate-backgrounds); without `overwrite`, AlreadyExists when output_dir is a
// non-empty folder holding anything else, another sample dataset included.
// With fewer images than source photos, only as many classes as images.
absl::Status WriteSampleDataset(const SampleDatasetOptions& options);

}  // namespace heterodl

#endif  // HETERODL_SRC_DATA_SAMPLE_DATASET_H_
