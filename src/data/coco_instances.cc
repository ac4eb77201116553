#include "src/data/coco_instances.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "heterodl/coco.pb.h"
#include "src/common/read_file.h"
#include "src/common/status_macros.h"

namespace heterodl {

namespace {

// An integer a double holds exactly: what a JSON id can be.
bool IsId(double value) { return std::floor(value) == value && std::fabs(value) <= 0x1p53; }

}  // namespace

absl::StatusOr<CocoSamples> ReadCocoInstances(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string json, ReadFileToString(path));
  return ParseCocoInstances(json, path);
}

absl::StatusOr<CocoSamples> ParseCocoInstances(const std::string& json, const std::string& path) {
  const auto invalid = [&path](const auto&... why) {
    return absl::InvalidArgumentError(absl::StrCat("COCO file '", path, "': ", why...));
  };
  v1::CocoInstances coco;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  if (const auto parsed = google::protobuf::util::JsonStringToMessage(json, &coco, options);
      !parsed.ok()) {
    return invalid("not a COCO instances file (", parsed.message().as_string(), ")");
  }
  if (coco.images().empty()) {
    return invalid("no images");
  }
  CocoSamples result;
  for (const v1::CocoCategory& category : coco.categories()) {
    if (category.id() < 0 || category.id() > kMaxLabel) {
      return invalid("category id ", category.id(), " outside [0, ", kMaxLabel, "]");
    }
    const auto id = static_cast<size_t>(category.id());
    if (result.class_names.size() <= id) {
      result.class_names.resize(id + 1);
    }
    if (!result.class_names[id].empty()) {
      return invalid("category id ", id, " given twice");
    }
    result.class_names[id] = category.name().empty() ? absl::StrCat(id) : category.name();
  }
  // Samples in image id order.
  std::map<int64_t, Sample> by_id;
  for (const v1::CocoImage& image : coco.images()) {
    if (!IsId(image.id())) {
      return invalid("image id ", image.id(), " is not an integer");
    }
    const auto id = static_cast<int64_t>(image.id());
    if (image.file_name().empty()) {
      return invalid("image ", id, " has no file_name");
    }
    Sample sample;
    sample.path = image.file_name();
    if (!by_id.emplace(id, std::move(sample)).second) {
      return invalid("image id ", id, " given twice");
    }
  }
  for (const v1::CocoAnnotation& annotation : coco.annotations()) {
    const auto image = IsId(annotation.image_id())
                           ? by_id.find(static_cast<int64_t>(annotation.image_id()))
                           : by_id.end();
    if (image == by_id.end()) {
      return invalid("annotation ", annotation.id(), " is of image ", annotation.image_id(),
                     ", which the file does not list");
    }
    const int64_t category = annotation.category_id();
    if (category < 0 || static_cast<size_t>(category) >= result.class_names.size() ||
        result.class_names[static_cast<size_t>(category)].empty()) {
      return invalid("annotation ", annotation.id(), " is of category ", category,
                     ", which the file does not list");
    }
    const auto& bbox = annotation.bbox();
    if (bbox.size() != 4 ||
        !std::all_of(bbox.begin(), bbox.end(), [](double v) { return std::isfinite(v); }) ||
        bbox[2] < 0 || bbox[3] < 0) {
      return invalid("annotation ", annotation.id(),
                     ": bbox is not [x, y, width, height] of finite numbers, width and height "
                     ">= 0");
    }
    if (annotation.iscrowd() != 0 && annotation.iscrowd() != 1) {
      return invalid("annotation ", annotation.id(), ": iscrowd ", annotation.iscrowd(),
                     " (0 or 1)");
    }
    Sample& sample = image->second;
    sample.boxes.push_back({static_cast<float>(bbox[0]), static_cast<float>(bbox[1]),
                            static_cast<float>(bbox[0] + bbox[2]),
                            static_cast<float>(bbox[1] + bbox[3])});
    sample.box_labels.push_back(category);
    sample.crowd.push_back(static_cast<uint8_t>(annotation.iscrowd()));
  }
  result.samples.reserve(by_id.size());
  for (auto& [id, sample] : by_id) {
    sample.detection = true;
    result.samples.push_back(std::move(sample));
  }
  for (size_t id = 0; id < result.class_names.size(); ++id) {
    if (result.class_names[id].empty()) {
      result.class_names[id] = id == 0 ? "__background__" : "N/A";
    }
  }
  if (result.class_names.empty()) {
    result.class_names.push_back("__background__");
  }
  return result;
}

}  // namespace heterodl
