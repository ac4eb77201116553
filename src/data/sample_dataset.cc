#include "src/data/sample_dataset.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"
#include "opencv2/imgproc.hpp"
#include "src/common/counter_rng.h"
#include "src/common/fingerprint.h"
#include "src/common/log.h"
#include "src/data/dataset.h"

namespace heterodl {
namespace {

namespace fs = std::filesystem;

// Written last: a folder holding this marker with the same stamp is complete
// and can be reused as it is.
constexpr char kMarkerFile[] = ".heterodl-sample";

struct SourcePhoto {
  std::string class_name;
  cv::Mat pixels;
};

// Photos, sorted by path. Packages ship some photos at several resolutions
// (Foo.jpg, Foo_3840x2160.jpg): only the plain name is used, so a class is
// one picture.
std::vector<fs::path> FindSourcePhotos(const std::string& source_dir) {
  std::vector<fs::path> photos;
  const std::regex resolution_variant(".*_[0-9]+x[0-9]+");
  std::error_code error;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(source_dir, error)) {
    const fs::path& path = entry.path();
    if (!entry.is_regular_file() || (path.extension() != ".jpg" && path.extension() != ".jpeg")) {
      continue;
    }
    if (std::regex_match(path.stem().string(), resolution_variant)) continue;
    photos.push_back(path);
  }
  std::sort(photos.begin(), photos.end());
  return photos;
}

std::string ClassName(const fs::path& photo) {
  std::string name;
  for (char c : photo.stem().string()) {
    name += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(c)) : '_';
  }
  return name;
}

std::string Stamp(const SampleDatasetOptions& options, const std::vector<fs::path>& photos) {
  Fingerprint fingerprint;
  fingerprint.Add(static_cast<uint64_t>(options.num_images)).Add(options.seed);
  for (const fs::path& photo : photos) fingerprint.Add(photo.string());
  return FingerprintToHex(fingerprint.value());
}

// One image: a random crop of 20-100% of the photo's shorter side with an
// aspect ratio of 4:3 to 3:4, resized to 300-600 px wide.
cv::Mat CutImage(const cv::Mat& photo, CounterRng& rng) {
  const double aspect = rng.Uniform(0.75, 1.3334);
  const int shorter = std::min(photo.cols, photo.rows);
  const double side = shorter * rng.Uniform(0.2, 1.0);
  int crop_w = std::min(photo.cols, static_cast<int>(side * std::sqrt(aspect)));
  int crop_h = std::min(photo.rows, static_cast<int>(side / std::sqrt(aspect)));
  crop_w = std::max(crop_w, 16);
  crop_h = std::max(crop_h, 16);
  const int left = static_cast<int>(rng.Below(photo.cols - crop_w + 1));
  const int top = static_cast<int>(rng.Below(photo.rows - crop_h + 1));
  const int out_w = 300 + static_cast<int>(rng.Below(301));
  const int out_h =
      std::max(1, static_cast<int>(std::lround(static_cast<double>(out_w) * crop_h / crop_w)));
  cv::Mat image;
  cv::resize(photo(cv::Rect(left, top, crop_w, crop_h)), image, {out_w, out_h}, 0, 0,
             out_w < crop_w ? cv::INTER_AREA : cv::INTER_LINEAR);
  return image;
}

}  // namespace

absl::Status WriteSampleDataset(const SampleDatasetOptions& options) {
  if (options.num_images <= 0) {
    return absl::InvalidArgumentError("--images must be > 0");
  }
  const std::vector<fs::path> photo_paths = FindSourcePhotos(options.source_dir);
  if (photo_paths.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no source photos (*.jpg) under '", options.source_dir,
        "': install Debian's mate-backgrounds package (apt-get install mate-backgrounds)"));
  }
  const std::string stamp = Stamp(options, photo_paths);
  const fs::path root(options.output_dir);
  const fs::path marker = root / kMarkerFile;
  std::error_code error;
  if (fs::exists(marker)) {
    absl::StatusOr<std::string> existing = ReadFileToString(marker.string());
    if (existing.ok() && absl::StripSuffix(*existing, "\n") == stamp) {
      LogInfo("sample dataset in %s is up to date", options.output_dir);
      return absl::OkStatus();
    }
  }
  if (fs::exists(root) && !fs::is_empty(root, error)) {
    if (!options.overwrite) {
      return absl::AlreadyExistsError(absl::StrCat(
          "'", options.output_dir, "' is not empty",
          fs::exists(marker) ? " (a sample dataset written with other --images or --seed)" : "",
          "; refusing to replace it (--overwrite replaces it)"));
    }
    fs::remove_all(root, error);
    if (error) {
      return absl::UnavailableError(
          absl::StrCat("cannot remove '", options.output_dir, "': ", error.message()));
    }
  }

  // Sources are 2-6k px wide; decoding at 1/2 scale keeps them far above the
  // output size and halves the time.
  std::vector<SourcePhoto> photos;
  for (const fs::path& path : photo_paths) {
    cv::Mat pixels = cv::imread(path.string(), cv::IMREAD_REDUCED_COLOR_2);
    if (pixels.empty() || pixels.cols < 64 || pixels.rows < 64) {
      LogWarning("skipping unreadable source photo %s", path.string());
      continue;
    }
    photos.push_back({ClassName(path), std::move(pixels)});
  }
  if (photos.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no readable source photos under '", options.source_dir, "'"));
  }
  // A class per image at most: no empty class folders.
  if (photos.size() > static_cast<size_t>(options.num_images)) photos.resize(options.num_images);
  for (const SourcePhoto& photo : photos) {
    fs::create_directories(root / photo.class_name, error);
    if (error) {
      return absl::UnavailableError(absl::StrCat(
          "cannot create '", (root / photo.class_name).string(), "': ", error.message()));
    }
  }
  for (int i = 0; i < options.num_images; ++i) {
    const SourcePhoto& photo = photos[i % photos.size()];
    CounterRng rng(options.seed, {kStreamSampleDataset, static_cast<uint32_t>(i), 0});
    cv::Mat image = CutImage(photo.pixels, rng);
    const int quality = 85 + static_cast<int>(rng.Below(11));
    const fs::path path =
        root / photo.class_name / absl::StrFormat("%s_%06d.jpg", photo.class_name, i);
    if (!cv::imwrite(path.string(), image, {cv::IMWRITE_JPEG_QUALITY, quality})) {
      return absl::UnavailableError(absl::StrCat("cannot write '", path.string(), "'"));
    }
  }
  std::ofstream(marker) << stamp << "\n";
  LogInfo("wrote %d images in %d classes to %s", options.num_images,
          static_cast<int>(photos.size()), options.output_dir);
  return absl::OkStatus();
}

}  // namespace heterodl
