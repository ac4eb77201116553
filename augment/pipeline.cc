#include "augment/pipeline.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "augment/decode.h"
#include "augment/pipeline_spec.h"
#include "augment/region_decode.h"
#include "augment/transforms.h"
#include "opencv2/core.hpp"
#include "opencv2/core/utility.hpp"
#include "opencv2/imgproc.hpp"
#include "src/common/status_macros.h"

namespace heterodl {
namespace {

// The header a region decoder reads, with `options` applied; nullopt for
// files only OpenCV decodes.
absl::StatusOr<std::optional<ImageHeader>> ReadHeader(absl::string_view encoded,
                                                      const PipelineOptions& options) {
  ASSIGN_OR_RETURN(std::optional<ImageHeader> header, ReadImageHeader(encoded, options.max_pixels));
  if (header && !options.png_inflate_whole) {
    header->png.inflate_whole = false;
  }
  return header;
}

// A resize of a very long image can ask for more pixels than any decoded
// image may have: refused before anything is allocated.
absl::Status CheckOutputPixels(const Transform& transform, cv::Size input, cv::Size output,
                               const PipelineOptions& options) {
  if (static_cast<double>(output.width) * output.height <=
      static_cast<double>(options.max_pixels)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      transform.Spec(), " would make a ", output.width, "x", output.height, " image of this ",
      input.width, "x", input.height, " one, over the limit of ", options.max_pixels, " pixels"));
}

// A mask must cover its image pixel for pixel.
absl::Status CheckMaskSize(const cv::Mat* mask, cv::Size image) {
  if (mask == nullptr || mask->size() == image) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("a mask of ", mask->cols, "x", mask->rows,
                                                 " for an image of ", image.width, "x",
                                                 image.height));
}

}  // namespace

Pipeline::Pipeline(Pipeline&&) noexcept = default;
Pipeline& Pipeline::operator=(Pipeline&&) noexcept = default;
Pipeline::~Pipeline() = default;

absl::StatusOr<Pipeline> Pipeline::Parse(absl::string_view spec, const PipelineOptions& options) {
  ASSIGN_OR_RETURN(PipelineSpec parsed, ParsePipelineSpec(spec));
  Pipeline pipeline;
  pipeline.options_ = options;
  pipeline.exact_decode_ = parsed.exact_decode;
  pipeline.transforms_ = std::move(parsed.transforms);
  pipeline.output_width_ = parsed.output_width;
  pipeline.output_height_ = parsed.output_height;
  return pipeline;
}

absl::StatusOr<size_t> Pipeline::Decode(absl::string_view encoded, CounterRng& rng,
                                        cv::Mat& destination, cv::Mat& image, std::string* warning,
                                        cv::Mat* mask, MovingBoxes* boxes) const {
  const JpegDamage damage = options_.strict_decode ? JpegDamage::kRefuse : JpegDamage::kDecode;
  if (options_.region_decode) {
    ASSIGN_OR_RETURN(const std::optional<ImageHeader> header, ReadHeader(encoded, options_));
    if (header) {
      RETURN_IF_ERROR(CheckMaskSize(mask, header->size));
      const Transform& first = *transforms_.front();
      const std::optional<RegionRequest> request = first.PlanRegion(header->size, rng);
      if (!request) {
        // Not fused with a crop: the whole image, still by this format's
        // decoder (checked limits, RGB straight out).
        const cv::Rect whole({0, 0}, header->size);
        RETURN_IF_ERROR(DecodeRegion(encoded, *header, {whole, header->size}, exact_decode_, image,
                                     damage, warning));
        return 0;
      }
      RETURN_IF_ERROR(CheckOutputPixels(first, header->size, request->output, options_));
      if (mask != nullptr) {
        // The region step, as the image takes it: the crop, then the scale.
        cv::Mat region = (*mask)(request->region);
        ResizeMask(region, request->output);
        *mask = region.clone();
      }
      if (boxes != nullptr) {
        boxes->Move(RegionAffine(*request), request->output);
      }
      // A decoder that scales to the output writes straight into the
      // caller's buffer.
      cv::Mat region;
      if (request->output == destination.size()) {
        region = destination;
      }
      RETURN_IF_ERROR(
          DecodeRegion(encoded, *header, *request, exact_decode_, region, damage, warning));
      if (region.data == destination.data) {
        image = destination;
        return 1;
      }
      if (request->output == destination.size()) {
        image = destination;
      }
      first.ApplyToRegion(region, *request, image);
      return 1;
    }
  }
  DecodeOptions decode_options;
  decode_options.max_pixels = options_.max_pixels;
  ASSIGN_OR_RETURN(image, DecodeImage(encoded, decode_options));
  RETURN_IF_ERROR(CheckMaskSize(mask, image.size()));
  return 0;
}

absl::Status Pipeline::Run(absl::string_view encoded, const SampleKey& key, uint8_t* out,
                           PipelineTimings* timings, const std::atomic<bool>* abandoned,
                           const SegmentationMask* mask, SampleBoxes* boxes) const {
  const auto check_abandoned = [abandoned] {
    return abandoned != nullptr && abandoned->load(std::memory_order_relaxed)
               ? absl::CancelledError("abandoned: no stream wants this sample any more")
               : absl::OkStatus();
  };
  RETURN_IF_ERROR(check_abandoned());
  CounterRng rng(key.seed, {kStreamAugment, key.epoch, static_cast<uint32_t>(key.index)});
  // Operations write into the caller's buffer where they can (resizes to the
  // output size, in-place flips); otherwise the result is copied at the end.
  cv::Mat destination(output_height_, output_width_, CV_8UC3, out);
  cv::Mat image;
  // The mask's own copy: operations replace or change it in place.
  cv::Mat ids;
  if (mask != nullptr) {
    if (mask->bytes_per_id != 1 && mask->bytes_per_id != 2) {
      return absl::InvalidArgumentError("a mask's ids are 1 or 2 bytes");
    }
    ids = cv::Mat(mask->height, mask->width, mask->bytes_per_id == 1 ? CV_8UC1 : CV_16UC1,
                  const_cast<uint8_t*>(mask->ids))
              .clone();
  }
  const absl::Time start = absl::Now();
  std::string warning;
  std::optional<MovingBoxes> moving;
  if (boxes != nullptr) {
    moving.emplace(boxes->boxes);
  }
  MovingBoxes* moving_boxes = moving ? &*moving : nullptr;
  ASSIGN_OR_RETURN(const size_t applied, Decode(encoded, rng, destination, image, &warning,
                                                mask != nullptr ? &ids : nullptr, moving_boxes));
  const absl::Time decoded = absl::Now();
  for (size_t i = applied; i < transforms_.size(); ++i) {
    RETURN_IF_ERROR(check_abandoned());
    RETURN_IF_ERROR(CheckOutputPixels(*transforms_[i], image.size(),
                                      transforms_[i]->OutputSize(image.size()), options_));
    if (mask != nullptr || moving_boxes != nullptr) {
      transforms_[i]->ApplyWithTargets(image, mask != nullptr ? &ids : nullptr,
                                       mask != nullptr ? mask->ignore_index : 0, moving_boxes, rng);
    } else {
      transforms_[i]->Apply(image, rng);
    }
  }
  if (moving_boxes != nullptr) {
    moving_boxes->Kept(options_.min_box_size, options_.min_box_visibility, &boxes->kept,
                       &boxes->kept_indices);
  }
  if (mask != nullptr) {
    if (ids.size() != destination.size()) {
      return absl::InternalError("pipeline produced a mask of an unexpected shape");
    }
    ids.copyTo(cv::Mat(output_height_, output_width_, ids.type(), mask->out));
  }
  if (image.data != destination.data) {
    if (image.size() != destination.size() || image.type() != CV_8UC3) {
      return absl::InternalError("pipeline produced an image of an unexpected shape");
    }
    image.copyTo(destination);
  }
  if (timings != nullptr) {
    timings->decode_seconds += absl::ToDoubleSeconds(decoded - start);
    timings->augment_seconds += absl::ToDoubleSeconds(absl::Now() - decoded);
    timings->decode_warning = std::move(warning);
  }
  return absl::OkStatus();
}

PipelineCost Pipeline::EstimateCost() const {
  PipelineCost cost;
  cv::Size size(kCostReferenceWidth, kCostReferenceHeight);
  cost.pixel_operations = size.area() + kOperationOverheadPixelOperations;  // decoding
  cost.largest_image_pixels = size.area();
  for (size_t i = 0; i < transforms_.size(); ++i) {
    const Transform& transform = *transforms_[i];
    const double operations = transform.Cost(size) + kOperationOverheadPixelOperations;
    cost.pixel_operations += operations;
    if (operations > cost.costliest_pixel_operations) {
      cost.costliest_operation = transform.Spec();
      cost.costliest_position = static_cast<int>(i) + 1;
      cost.costliest_pixel_operations = operations;
      cost.costliest_input_width = size.width;
      cost.costliest_input_height = size.height;
    }
    size = transform.OutputSize(size);
    cost.largest_image_pixels =
        std::max(cost.largest_image_pixels, static_cast<double>(size.width) * size.height);
  }
  return cost;
}

void RunPipelinesOnCallerThreadsOnly() { cv::setNumThreads(0); }

std::string Pipeline::DecodePath(absl::string_view encoded) const {
  if (options_.region_decode) {
    const absl::StatusOr<std::optional<ImageHeader>> header = ReadHeader(encoded, options_);
    if (header.ok() && header->has_value()) {
      return RegionDecodePath(**header, /*whole_image=*/!transforms_.front()->PlansRegions());
    }
  }
  return "OpenCV: whole image";
}

std::string Pipeline::CanonicalSpec() const {
  std::vector<std::string> parts = {exact_decode_ ? "decode(exact)" : "decode(fast)"};
  for (const std::unique_ptr<Transform>& transform : transforms_) {
    parts.push_back(transform->Spec());
  }
  return absl::StrJoin(parts, "|");
}

}  // namespace heterodl
