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
// resized to 300-600 px wide and re-encoded at JPEG quality 85-95. The output
// is a pure function of (source photos, num_images, seed).
#ifndef HETERODL_SRC_DATA_SAMPLE_DATASET_H_
#define HETERODL_SRC_DATA_SAMPLE_DATASET_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace heterodl {

struct SampleDatasetOptions {
  std::string output_dir;
  int num_images = 512;
  uint64_t seed = 0;
  // Folder searched (recursively) for source photos (*.jpg).
  std::string source_dir = "/usr/share/backgrounds/mate";
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
