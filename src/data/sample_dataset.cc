#include "src/data/sample_dataset.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"
#include "heterodl/coco.pb.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"
#include "opencv2/imgproc.hpp"
#include "src/common/counter_rng.h"
#include "src/common/fingerprint.h"
#include "src/common/log.h"
#include "src/common/status_macros.h"
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
    if (std::regex_match(path.stem().string(), resolution_variant)) {
      continue;
    }
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

bool AllJpeg(const std::vector<SampleFormatShare>& formats) {
  return formats.size() == 1 && formats[0].format == SampleFormat::kJpeg;
}

std::string Stamp(const SampleDatasetOptions& options, const std::vector<fs::path>& photos) {
  Fingerprint fingerprint;
  fingerprint.Add(static_cast<uint64_t>(options.num_images)).Add(options.seed);
  for (const fs::path& photo : photos) {
    fingerprint.Add(photo.string());
  }
  if (options.task == SampleTask::kSegmentation) {
    fingerprint.Add(std::string("segmentation"));
  }
  if (options.task == SampleTask::kDetection) {
    fingerprint.Add(std::string("detection"));
  }
  if (options.width > 0 && options.height > 0) {
    fingerprint.Add(static_cast<uint64_t>(options.width))
        .Add(static_cast<uint64_t>(options.height));
  }
  // All-JPEG sets keep the stamp they had before formats existed.
  if (!AllJpeg(options.formats)) {
    for (const SampleFormatShare& share : options.formats) {
      fingerprint.Add(std::string(SampleFormatName(share.format)))
          .Add(static_cast<uint64_t>(share.percent));
    }
  }
  return FingerprintToHex(fingerprint.value());
}

// The format of image `i`: i * 37 mod 100 visits every residue once in any
// 100 consecutive images (37 and 100 are coprime), so each block of 100
// holds exactly the shares, spread over the classes rather than in runs.
SampleFormat FormatOf(int i, const std::vector<SampleFormatShare>& formats) {
  int slot = static_cast<int>((int64_t{i} * 37) % 100);
  for (const SampleFormatShare& share : formats) {
    if (slot < share.percent) {
      return share.format;
    }
    slot -= share.percent;
  }
  return formats.back().format;
}

// Encodes `image` (BGR) as `format`, drawing its quality from `rng`.
absl::StatusOr<std::vector<uint8_t>> EncodeAs(const cv::Mat& image, SampleFormat format,
                                              CounterRng& rng) {
  std::vector<uint8_t> bytes;
  bool ok = false;
  switch (format) {
    case SampleFormat::kJpeg:
    case SampleFormat::kProgressiveJpeg:
    case SampleFormat::kGrayscaleJpeg: {
      const int quality = 85 + static_cast<int>(rng.Below(11));
      std::vector<int> parameters = {cv::IMWRITE_JPEG_QUALITY, quality};
      if (format == SampleFormat::kProgressiveJpeg) {
        parameters.insert(parameters.end(), {cv::IMWRITE_JPEG_PROGRESSIVE, 1});
      }
      cv::Mat pixels = image;
      if (format == SampleFormat::kGrayscaleJpeg) {
        cv::cvtColor(image, pixels, cv::COLOR_BGR2GRAY);
      }
      ok = cv::imencode(".jpg", pixels, bytes, parameters);
      break;
    }
    case SampleFormat::kPng:
      ok = cv::imencode(".png", image, bytes, {cv::IMWRITE_PNG_COMPRESSION, 6});
      break;
    case SampleFormat::kWebp: {
      const int quality = 80 + static_cast<int>(rng.Below(16));
      ok = cv::imencode(".webp", image, bytes, {cv::IMWRITE_WEBP_QUALITY, quality});
      break;
    }
  }
  if (!ok) {
    return absl::UnavailableError(
        absl::StrCat("this OpenCV cannot encode ", SampleFormatName(format), " images"));
  }
  return bytes;
}

absl::Status WriteBytes(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream file(path, std::ios::binary);
  file.write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  file.close();
  if (!file) {
    return absl::UnavailableError(absl::StrCat("cannot write '", path.string(), "'"));
  }
  return absl::OkStatus();
}

// One image: a random crop of 20-100% of the photo's shorter side with an
// aspect ratio of 4:3 to 3:4, resized to 300-600 px wide; or, with a `size`,
// of that aspect, resized to it.
cv::Mat CutImage(const cv::Mat& photo, CounterRng& rng, cv::Size size) {
  const double drawn = rng.Uniform(0.75, 1.3334);
  const double aspect = size.area() > 0 ? static_cast<double>(size.width) / size.height : drawn;
  const int shorter = std::min(photo.cols, photo.rows);
  const double side = shorter * rng.Uniform(0.2, 1.0);
  int crop_w = std::min(photo.cols, static_cast<int>(side * std::sqrt(aspect)));
  int crop_h = std::min(photo.rows, static_cast<int>(side / std::sqrt(aspect)));
  crop_w = std::max(crop_w, 16);
  crop_h = std::max(crop_h, 16);
  const int left = static_cast<int>(rng.Below(photo.cols - crop_w + 1));
  const int top = static_cast<int>(rng.Below(photo.rows - crop_h + 1));
  const int drawn_w = 300 + static_cast<int>(rng.Below(301));
  const int out_w = size.area() > 0 ? size.width : drawn_w;
  const int out_h =
      size.area() > 0
          ? size.height
          : std::max(1,
                     static_cast<int>(std::lround(static_cast<double>(out_w) * crop_h / crop_w)));
  cv::Mat image;
  cv::resize(photo(cv::Rect(left, top, crop_w, crop_h)), image, {out_w, out_h}, 0, 0,
             out_w < crop_w ? cv::INTER_AREA : cv::INTER_LINEAR);
  return image;
}

constexpr std::pair<SampleFormat, absl::string_view> kFormatNames[] = {
    {SampleFormat::kJpeg, "jpeg"},
    {SampleFormat::kGrayscaleJpeg, "grayscale"},
    {SampleFormat::kProgressiveJpeg, "progressive"},
    {SampleFormat::kPng, "png"},
    {SampleFormat::kWebp, "webp"},
};

}  // namespace

absl::string_view SampleFormatName(SampleFormat format) {
  for (const auto& [known, name] : kFormatNames) {
    if (known == format) {
      return name;
    }
  }
  return "?";
}

absl::StatusOr<std::vector<SampleFormatShare>> ParseSampleFormats(absl::string_view text) {
  if (text == "mixed") {
    text = "jpeg=60,grayscale=10,progressive=10,png=10,webp=10";
  }
  std::vector<SampleFormatShare> shares;
  int total = 0;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::pair<absl::string_view, absl::string_view> name_percent =
        absl::StrSplit(part, absl::MaxSplits('=', 1));
    SampleFormatShare share;
    const auto* known =
        std::find_if(std::begin(kFormatNames), std::end(kFormatNames),
                     [&](const auto& entry) { return entry.second == name_percent.first; });
    if (known == std::end(kFormatNames)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--formats: unknown format '", name_percent.first, "' (known: ",
          absl::StrJoin(
              kFormatNames, ", ",
              [](std::string* out, const auto& entry) { absl::StrAppend(out, entry.second); }),
          ", or 'mixed')"));
    }
    share.format = known->first;
    const bool single = !absl::StrContains(part, '=');
    if (!single && (!absl::SimpleAtoi(name_percent.second, &share.percent) || share.percent <= 0 ||
                    share.percent > 100)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--formats: '", part, "' needs a percentage from 1 to 100, e.g. png=10"));
    }
    for (const SampleFormatShare& earlier : shares) {
      if (earlier.format == share.format) {
        return absl::InvalidArgumentError(
            absl::StrCat("--formats: '", name_percent.first, "' is given twice"));
      }
    }
    total += share.percent;
    shares.push_back(share);
  }
  if (total != 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("--formats: the percentages sum to ", total, ", not 100"));
  }
  return shares;
}

absl::StatusOr<SampleTask> ParseSampleTask(absl::string_view text) {
  if (text == "classification") {
    return SampleTask::kClassification;
  }
  if (text == "segmentation") {
    return SampleTask::kSegmentation;
  }
  if (text == "detection") {
    return SampleTask::kDetection;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--task '", text, "': expected classification, segmentation or detection"));
}

absl::StatusOr<std::pair<int, int>> ParseSampleImageSize(absl::string_view text) {
  if (text.empty()) {
    return std::pair<int, int>(0, 0);
  }
  const std::vector<absl::string_view> sides = absl::StrSplit(text, 'x');
  int height = 0;
  int width = 0;
  if (sides.size() != 2 || !absl::SimpleAtoi(sides[0], &height) ||
      !absl::SimpleAtoi(sides[1], &width) || height < 16 || width < 16 || height > 16384 ||
      width > 16384) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sample-size '", text, "': expected HxW, each side 16 to 16384 (e.g. 1024x2048)"));
  }
  return std::pair<int, int>(height, width);
}

namespace {

absl::string_view ExtensionOf(SampleFormat format) {
  return format == SampleFormat::kPng ? "png" : format == SampleFormat::kWebp ? "webp" : "jpg";
}

// Draws one to three shapes on `image` and their class ids on `mask`, the
// same pixels in both (no antialiasing, so every edge pixel is one class).
// One shape's object: its category (the mask's id) and box, xywh in pixels,
// clipped to the image.
struct ShapeObject {
  int category;
  cv::Rect2d box;
};

// Draws one to three shapes on `image` and their ids on `mask`; their
// objects in `objects` (optional).
void DrawShapes(cv::Mat& image, cv::Mat& mask, CounterRng& rng,
                std::vector<ShapeObject>* objects = nullptr) {
  const int shapes = 1 + static_cast<int>(rng.Below(3));
  for (int s = 0; s < shapes; ++s) {
    const int id = 1 + static_cast<int>(rng.Below(3));
    const cv::Scalar colour(static_cast<double>(rng.Below(256)),
                            static_cast<double>(rng.Below(256)),
                            static_cast<double>(rng.Below(256)));
    const cv::Point center(static_cast<int>(rng.Below(image.cols)),
                           static_cast<int>(rng.Below(image.rows)));
    const int extent =
        std::max(8, static_cast<int>(std::min(image.cols, image.rows) * rng.Uniform(0.1, 0.35)));
    // What the shape covers of the image, as drawn below (the extent's
    // last pixel included).
    const cv::Rect outline =
        id == 1   ? cv::Rect(center.x - extent, center.y - extent / 2, 2 * extent, extent)
        : id == 2 ? cv::Rect(center.x - extent, center.y - extent * 2 / 3, 2 * extent + 1,
                             extent * 2 / 3 * 2 + 1)
                  : cv::Rect(center.x - extent, center.y - extent, 2 * extent + 1, 2 * extent + 1);
    const cv::Rect visible = outline & cv::Rect(0, 0, image.cols, image.rows);
    if (objects != nullptr && visible.area() > 0) {
      objects->push_back({id, cv::Rect2d(visible)});
    }
    for (auto [target, fill] : {std::pair<cv::Mat*, cv::Scalar>{&image, colour},
                                std::pair<cv::Mat*, cv::Scalar>{&mask, cv::Scalar(id)}}) {
      if (id == 1) {
        cv::rectangle(*target,
                      cv::Rect(center.x - extent, center.y - extent / 2, 2 * extent, extent), fill,
                      cv::FILLED, cv::LINE_8);
      } else if (id == 2) {
        cv::ellipse(*target, center, {extent, extent * 2 / 3}, 0, 0, 360, fill, cv::FILLED,
                    cv::LINE_8);
      } else {
        const std::vector<cv::Point> triangle = {{center.x, center.y - extent},
                                                 {center.x - extent, center.y + extent},
                                                 {center.x + extent, center.y + extent}};
        cv::fillPoly(*target, std::vector<std::vector<cv::Point>>{triangle}, fill, cv::LINE_8);
      }
    }
  }
}

}  // namespace

absl::Status WriteSampleDataset(const SampleDatasetOptions& options) {
  if (options.num_images <= 0) {
    return absl::InvalidArgumentError("--images must be > 0");
  }
  if (options.formats.empty()) {
    return absl::InvalidArgumentError("no image formats given");
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
  if (options.task == SampleTask::kDetection) {
    fs::create_directories(root / "images", error);
    if (error) {
      return absl::UnavailableError(
          absl::StrCat("cannot create '", (root / "images").string(), "': ", error.message()));
    }
    // The annotations as COCO writes them, through protobuf's JSON printer.
    v1::CocoInstances coco;
    for (const auto& [id, name] :
         {std::pair<int, const char*>{1, "rectangle"}, std::pair<int, const char*>{2, "ellipse"},
          std::pair<int, const char*>{3, "triangle"}}) {
      v1::CocoCategory* category = coco.add_categories();
      category->set_id(id);
      category->set_name(name);
    }
    for (int i = 0; i < options.num_images; ++i) {
      // The segmentation sample's draws: the same images, shapes and all.
      CounterRng rng(options.seed, {kStreamSampleDataset, static_cast<uint32_t>(i), 1});
      cv::Mat image =
          CutImage(photos[i % photos.size()].pixels, rng, {options.width, options.height});
      cv::Mat mask(image.size(), CV_8UC1, cv::Scalar(0));
      std::vector<ShapeObject> objects;
      DrawShapes(image, mask, rng, &objects);
      const std::string name = absl::StrFormat("%06d", i);
      const SampleFormat format = FormatOf(i, options.formats);
      ASSIGN_OR_RETURN(const std::vector<uint8_t> bytes, EncodeAs(image, format, rng));
      const std::string file_name = absl::StrCat("images/", name, ".", ExtensionOf(format));
      RETURN_IF_ERROR(WriteBytes(root / file_name, bytes));
      v1::CocoImage* entry = coco.add_images();
      entry->set_id(i + 1);
      entry->set_file_name(file_name);
      entry->set_width(image.cols);
      entry->set_height(image.rows);
      for (const ShapeObject& object : objects) {
        v1::CocoAnnotation* annotation = coco.add_annotations();
        annotation->set_id(coco.annotations_size());
        annotation->set_image_id(i + 1);
        annotation->set_category_id(object.category);
        for (const double value :
             {object.box.x, object.box.y, object.box.width, object.box.height}) {
          annotation->add_bbox(value);
        }
      }
    }
    google::protobuf::util::JsonPrintOptions print;
    print.preserve_proto_field_names = true;  // COCO's names: file_name, image_id
    std::string json;
    if (!google::protobuf::util::MessageToJsonString(coco, &json, print).ok()) {
      return absl::InternalError("cannot write the sample's COCO annotations");
    }
    RETURN_IF_ERROR(
        WriteBytes(root / "annotations.json", std::vector<uint8_t>(json.begin(), json.end())));
    std::ofstream(marker) << stamp << "\n";
    LogInfo("wrote %d images with %d objects (3 categories) to %s; serve --dataset %s",
            options.num_images, coco.annotations_size(), options.output_dir,
            (root / "annotations.json").string());
    return absl::OkStatus();
  }
  if (options.task == SampleTask::kSegmentation) {
    for (const char* folder : {"images", "masks"}) {
      fs::create_directories(root / folder, error);
      if (error) {
        return absl::UnavailableError(
            absl::StrCat("cannot create '", (root / folder).string(), "': ", error.message()));
      }
    }
    for (int i = 0; i < options.num_images; ++i) {
      CounterRng rng(options.seed, {kStreamSampleDataset, static_cast<uint32_t>(i), 1});
      cv::Mat image =
          CutImage(photos[i % photos.size()].pixels, rng, {options.width, options.height});
      cv::Mat mask(image.size(), CV_8UC1, cv::Scalar(0));
      DrawShapes(image, mask, rng);
      const std::string name = absl::StrFormat("%06d", i);
      const SampleFormat format = FormatOf(i, options.formats);
      ASSIGN_OR_RETURN(const std::vector<uint8_t> bytes, EncodeAs(image, format, rng));
      RETURN_IF_ERROR(
          WriteBytes(root / "images" / absl::StrCat(name, ".", ExtensionOf(format)), bytes));
      std::vector<uint8_t> mask_bytes;
      if (!cv::imencode(".png", mask, mask_bytes)) {
        return absl::InternalError("cannot encode a sample mask");
      }
      RETURN_IF_ERROR(WriteBytes(root / "masks" / (name + ".png"), mask_bytes));
    }
    // Mask id i is line i's class (Dataset's classes.txt).
    const std::string classes = "background\nrectangle\nellipse\ntriangle\n";
    RETURN_IF_ERROR(
        WriteBytes(root / "classes.txt", std::vector<uint8_t>(classes.begin(), classes.end())));
    std::ofstream(marker) << stamp << "\n";
    LogInfo("wrote %d images with segmentation masks (4 classes) to %s", options.num_images,
            options.output_dir);
    return absl::OkStatus();
  }
  // A class per image at most: no empty class folders.
  if (photos.size() > static_cast<size_t>(options.num_images)) {
    photos.resize(options.num_images);
  }
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
    cv::Mat image = CutImage(photo.pixels, rng, {options.width, options.height});
    const SampleFormat format = FormatOf(i, options.formats);
    ASSIGN_OR_RETURN(const std::vector<uint8_t> bytes, EncodeAs(image, format, rng));
    RETURN_IF_ERROR(
        WriteBytes(root / photo.class_name /
                       absl::StrFormat("%s_%06d.%s", photo.class_name, i, ExtensionOf(format)),
                   bytes));
  }
  std::ofstream(marker) << stamp << "\n";
  LogInfo("wrote %d images in %d classes to %s", options.num_images,
          static_cast<int>(photos.size()), options.output_dir);
  return absl::OkStatus();
}

}  // namespace heterodl
