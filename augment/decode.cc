#include "augment/decode.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"
#include "opencv2/imgproc.hpp"
#include "opencv2/imgproc.hpp"

namespace heterodl {

absl::StatusOr<cv::Mat> DecodeImage(absl::string_view encoded, const DecodeOptions& options) {
  if (encoded.empty()) return absl::InvalidArgumentError("empty image file");
  // imdecode reads from a Mat header over the caller's bytes: no copy.
  const cv::Mat buffer(1, static_cast<int>(encoded.size()), CV_8UC1,
                       const_cast<char*>(encoded.data()));
  cv::Mat image;
  try {
    image = cv::imdecode(buffer, cv::IMREAD_COLOR);
  } catch (const cv::Exception& error) {
    return absl::InvalidArgumentError(absl::StrCat("cannot decode image: ", error.what()));
  }
  if (image.empty()) {
    return absl::InvalidArgumentError(
        "cannot decode image: not a supported image format, or corrupt");
  }
  if (static_cast<int64_t>(image.rows) * image.cols > options.max_pixels) {
    return absl::InvalidArgumentError(absl::StrCat("image is ", image.cols, "x", image.rows,
                                                   ", over the limit of ", options.max_pixels,
                                                   " pixels"));
  }
  cv::cvtColor(image, image, cv::COLOR_BGR2RGB);
  return image;
}

}  // namespace heterodl
