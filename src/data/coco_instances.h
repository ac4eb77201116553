// ReadCocoInstances: a COCO instances file (annotations/instances_*.json) as
// detection samples, one per image, in image id order (as torchvision's
// CocoDetection lists them), each with its objects' boxes, category ids and
// crowd flags. Parsed with protobuf's JSON parser into heterodl/coco.proto;
// what it does not name (segmentation polygons, areas) is ignored.
//
//   ASSIGN_OR_RETURN(CocoSamples coco, ReadCocoInstances("annotations/instances_val2017.json"));
#ifndef HETERODL_SRC_DATA_COCO_INSTANCES_H_
#define HETERODL_SRC_DATA_COCO_INSTANCES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/data/dataset.h"

namespace heterodl {

struct CocoSamples {
  // Paths as the file names them (relative to the image root unless
  // absolute); boxes xyxy, converted from COCO's [x, y, width, height].
  std::vector<Sample> samples;
  // By category id, as torchvision's detection models take labels (COCO's
  // 80 categories are ids 1 to 90, so num_classes=91): an id no category
  // has is "__background__" at 0 and "N/A" elsewhere, as torchvision's
  // COCO category list names them; never an empty name.
  std::vector<std::string> class_names;
};

// INVALID_ARGUMENT naming the file and what is wrong: not JSON of that
// shape, no images, an image or category id given twice, an annotation of
// an image or category the file does not list, a box that is not four
// finite numbers of non-negative size, a crowd flag other than 0 or 1, a
// category id over kMaxLabel. NOT_FOUND / UNAVAILABLE when it cannot be read.
absl::StatusOr<CocoSamples> ReadCocoInstances(const std::string& path);
// The same from the file's `json` text; errors name `path`.
absl::StatusOr<CocoSamples> ParseCocoInstances(const std::string& json, const std::string& path);

}  // namespace heterodl

#endif  // HETERODL_SRC_DATA_COCO_INSTANCES_H_
