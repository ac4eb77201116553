#include "augment/pipeline.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
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
  return absl::InvalidArgumentError(
      absl::StrCat(transform.Spec(), " would make a ", output.width, "x", output.height,
                   " image of this ", input.width, "x", input.height, " one, over the limit of ",
                   options.max_pixels, " pixels (serve --max-pixels)"));
}

absl::Status CheckAbandoned(const std::atomic<bool>* abandoned) {
  return abandoned != nullptr && abandoned->load(std::memory_order_relaxed)
             ? absl::CancelledError("abandoned: no stream wants this sample any more")
             : absl::OkStatus();
}

// `region` (full-resolution coordinates) within a decoding of `decoded`
// (full-resolution coordinates) that is `image`'s size: scaled, rounded
// outwards, at least a pixel.
cv::Rect RegionWithin(const cv::Rect& region, const cv::Rect& decoded, cv::Size image) {
  const double sx = static_cast<double>(image.width) / decoded.width;
  const double sy = static_cast<double>(image.height) / decoded.height;
  const int x0 =
      std::clamp(static_cast<int>(std::floor((region.x - decoded.x) * sx)), 0, image.width - 1);
  const int y0 =
      std::clamp(static_cast<int>(std::floor((region.y - decoded.y) * sy)), 0, image.height - 1);
  const int x1 = std::clamp(static_cast<int>(std::ceil((region.br().x - decoded.x) * sx)), x0 + 1,
                            image.width);
  const int y1 = std::clamp(static_cast<int>(std::ceil((region.br().y - decoded.y) * sy)), y0 + 1,
                            image.height);
  return {x0, y0, x1 - x0, y1 - y0};
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

// One group of a view spec, "COUNT*SPEC", as written.
struct ViewGroupText {
  int count = 1;
  absl::string_view spec;
  bool counted = false;  // written with "COUNT*"
};

// Splits "2*A;8*B" into its groups; INVALID_ARGUMENT for a count that is
// not an integer in [1, kMaxViews] or more than kMaxViews views in all.
absl::StatusOr<std::vector<ViewGroupText>> SplitViewGroups(absl::string_view spec) {
  std::vector<ViewGroupText> groups;
  int views = 0;
  for (absl::string_view part : absl::StrSplit(spec, ';')) {
    ViewGroupText group{1, part, false};
    const size_t star = part.find('*');
    if (star != absl::string_view::npos) {
      const absl::string_view count = absl::StripAsciiWhitespace(part.substr(0, star));
      if (!absl::SimpleAtoi(count, &group.count) || group.count < 1 || group.count > kMaxViews) {
        return absl::InvalidArgumentError(
            absl::StrCat("pipeline spec: view group ", groups.size() + 1, ": '", count,
                         "*' must be a count of views in [1, ", kMaxViews, "] before '*'"));
      }
      group.spec = part.substr(star + 1);
      group.counted = true;
    }
    views += group.count;
    groups.push_back(group);
  }
  if (views > kMaxViews) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline spec: ", views, " views of each sample, over the limit of ", kMaxViews));
  }
  return groups;
}

}  // namespace

struct Pipeline::ViewGroup {
  int count = 1;
  PipelineSpec spec;
};

Pipeline::Pipeline(Pipeline&&) noexcept = default;
Pipeline& Pipeline::operator=(Pipeline&&) noexcept = default;
Pipeline::~Pipeline() = default;

absl::StatusOr<Pipeline> Pipeline::Parse(absl::string_view spec, const PipelineOptions& options) {
  ASSIGN_OR_RETURN(const std::vector<ViewGroupText> texts, SplitViewGroups(spec));
  Pipeline pipeline;
  pipeline.options_ = options;
  for (size_t g = 0; g < texts.size(); ++g) {
    absl::StatusOr<PipelineSpec> parsed = ParsePipelineSpec(texts[g].spec);
    if (!parsed.ok()) {
      if (texts.size() == 1 && !texts[g].counted) {
        return parsed.status();
      }
      return absl::InvalidArgumentError(
          absl::StrCat("view group ", g + 1, ": ", parsed.status().message()));
    }
    pipeline.exact_decode_ = pipeline.exact_decode_ || parsed->exact_decode;
    pipeline.shapes_.push_back({texts[g].count, parsed->output_height, parsed->output_width});
    pipeline.groups_.push_back({texts[g].count, *std::move(parsed)});
  }
  return pipeline;
}

size_t Pipeline::output_bytes() const {
  size_t bytes = 0;
  for (const ViewGroupShape& shape : shapes_) {
    bytes += shape.bytes();
  }
  return bytes;
}

absl::StatusOr<size_t> Pipeline::Decode(absl::string_view encoded, CounterRng& rng,
                                        cv::Mat& destination, cv::Mat& image, std::string* warning,
                                        cv::Mat* mask, MovingBoxes* boxes) const {
  const JpegDamage damage = options_.strict_decode ? JpegDamage::kRefuse : JpegDamage::kDecode;
  if (options_.region_decode) {
    ASSIGN_OR_RETURN(const std::optional<ImageHeader> header, ReadHeader(encoded, options_));
    if (header) {
      RETURN_IF_ERROR(CheckMaskSize(mask, header->size));
      const Transform& first = *groups_.front().spec.transforms.front();
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
  if (multi_view()) {
    if (mask != nullptr || boxes != nullptr) {
      return absl::InvalidArgumentError(
          "a multi-view pipeline takes images alone, not masks or boxes");
    }
    std::vector<uint8_t*> group_outputs;
    for (const ViewGroupShape& shape : shapes_) {
      group_outputs.push_back(out);
      out += shape.bytes();
    }
    return RunMultiView(encoded, key, group_outputs, timings, abandoned);
  }
  const auto check_abandoned = [abandoned] { return CheckAbandoned(abandoned); };
  RETURN_IF_ERROR(check_abandoned());
  const std::vector<std::unique_ptr<Transform>>& transforms = groups_.front().spec.transforms;
  CounterRng rng(key.seed, {kStreamAugment, key.epoch, static_cast<uint32_t>(key.index)});
  // Operations write into the caller's buffer where they can (resizes to the
  // output size, in-place flips); otherwise the result is copied at the end.
  cv::Mat destination(output_height(), output_width(), CV_8UC3, out);
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
  for (size_t i = applied; i < transforms.size(); ++i) {
    RETURN_IF_ERROR(check_abandoned());
    RETURN_IF_ERROR(CheckOutputPixels(*transforms[i], image.size(),
                                      transforms[i]->OutputSize(image.size()), options_));
    if (mask != nullptr || moving_boxes != nullptr) {
      transforms[i]->ApplyWithTargets(image, mask != nullptr ? &ids : nullptr,
                                      mask != nullptr ? mask->ignore_index : 0, moving_boxes, rng);
    } else {
      transforms[i]->Apply(image, rng);
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
    ids.copyTo(cv::Mat(output_height(), output_width(), ids.type(), mask->out));
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

absl::Status Pipeline::DecodeEntropyOnly(absl::string_view encoded, const SampleKey& key) const {
  if (multi_view()) {
    return absl::UnimplementedError("a multi-view pipeline has no entropy-only decode");
  }
  std::optional<ImageHeader> header;
  if (options_.region_decode) {
    ASSIGN_OR_RETURN(header, ReadHeader(encoded, options_));
  }
  if (!header) {
    return absl::UnimplementedError("OpenCV decodes this file whole");
  }
  // Run()'s draw, from Run()'s stream.
  CounterRng rng(key.seed, {kStreamAugment, key.epoch, static_cast<uint32_t>(key.index)});
  const std::optional<RegionRequest> request =
      groups_.front().spec.transforms.front()->PlanRegion(header->size, rng);
  const cv::Rect whole({0, 0}, header->size);
  return DecodeRegionEntropyOnly(encoded, *header,
                                 request ? *request : RegionRequest{whole, header->size});
}

PipelineCost Pipeline::EstimateCost() const {
  PipelineCost cost;
  const cv::Size reference(kCostReferenceWidth, kCostReferenceHeight);
  // Decoded once, whatever the views.
  cost.pixel_operations = reference.area() + kOperationOverheadPixelOperations;
  cost.largest_image_pixels = reference.area();
  int position = 0;  // counted over every group's operations, in spec order
  for (const ViewGroup& group : groups_) {
    cv::Size size = reference;
    for (const std::unique_ptr<Transform>& transform : group.spec.transforms) {
      ++position;
      const double operations = transform->Cost(size) + kOperationOverheadPixelOperations;
      cost.pixel_operations += operations * group.count;
      if (operations > cost.costliest_pixel_operations) {
        cost.costliest_operation = transform->Spec();
        cost.costliest_position = position;
        cost.costliest_pixel_operations = operations;
        cost.costliest_input_width = size.width;
        cost.costliest_input_height = size.height;
      }
      size = transform->OutputSize(size);
      cost.largest_image_pixels =
          std::max(cost.largest_image_pixels, static_cast<double>(size.width) * size.height);
    }
  }
  return cost;
}

absl::Status Pipeline::RunViews(absl::string_view encoded, const SampleKey& key,
                                const std::vector<uint8_t*>& group_outputs,
                                PipelineTimings* timings,
                                const std::atomic<bool>* abandoned) const {
  if (group_outputs.size() != groups_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("RunViews: ", group_outputs.size(),
                                                   " outputs for ", groups_.size(), " groups"));
  }
  if (!multi_view()) {
    return Run(encoded, key, group_outputs.front(), timings, abandoned);
  }
  return RunMultiView(encoded, key, group_outputs, timings, abandoned);
}

absl::Status Pipeline::RunMultiView(absl::string_view encoded, const SampleKey& key,
                                    const std::vector<uint8_t*>& group_outputs,
                                    PipelineTimings* timings,
                                    const std::atomic<bool>* abandoned) const {
  RETURN_IF_ERROR(CheckAbandoned(abandoned));
  const absl::Time start = absl::Now();
  std::string warning;
  const JpegDamage damage = options_.strict_decode ? JpegDamage::kRefuse : JpegDamage::kDecode;
  std::optional<ImageHeader> header;
  cv::Mat whole;  // OpenCV's decoding, for files no region decoder reads
  if (options_.region_decode) {
    ASSIGN_OR_RETURN(header, ReadHeader(encoded, options_));
  }
  if (!header) {
    DecodeOptions decode_options;
    decode_options.max_pixels = options_.max_pixels;
    ASSIGN_OR_RETURN(whole, DecodeImage(encoded, decode_options));
  }
  const cv::Size image_size = header ? header->size : whole.size();

  // Each view's generator and the region its first operation needs, if it
  // plans one.
  struct View {
    const ViewGroup* group;
    uint8_t* out;
    CounterRng rng;
    std::optional<RegionRequest> request;
  };
  std::vector<View> views;
  views.reserve(kMaxViews);
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (int k = 0; k < groups_[g].count; ++k) {
      const auto v = static_cast<uint32_t>(views.size());
      views.push_back({&groups_[g], group_outputs[g] + k * shapes_[g].view_bytes(),
                       CounterRng(key.seed, {kStreamViewAugment + v, key.epoch,
                                             static_cast<uint32_t>(key.index)}),
                       std::nullopt});
    }
  }
  // The union of the regions and the largest scale any view needs: a view
  // that plans none needs the whole image at full scale.
  cv::Rect decoded_region;
  double scale = 0;
  for (View& view : views) {
    const Transform& first = *view.group->spec.transforms.front();
    view.request = first.PlanRegion(image_size, view.rng);
    if (!view.request) {
      decoded_region = cv::Rect({0, 0}, image_size);
      scale = 1;
      continue;
    }
    RETURN_IF_ERROR(CheckOutputPixels(first, image_size, view.request->output, options_));
    decoded_region =
        decoded_region.empty() ? view.request->region : (decoded_region | view.request->region);
    scale = std::max(
        {scale, static_cast<double>(view.request->output.width) / view.request->region.width,
         static_cast<double>(view.request->output.height) / view.request->region.height});
  }
  scale = std::min(scale, 1.0);
  cv::Mat decoded = whole;
  if (header) {
    const cv::Size size(std::max(1, static_cast<int>(std::ceil(decoded_region.width * scale))),
                        std::max(1, static_cast<int>(std::ceil(decoded_region.height * scale))));
    RETURN_IF_ERROR(DecodeRegion(encoded, *header, {decoded_region, size}, exact_decode_, decoded,
                                 damage, &warning));
  } else {
    decoded_region = cv::Rect({0, 0}, image_size);
  }
  const absl::Time decoded_at = absl::Now();

  for (View& view : views) {
    RETURN_IF_ERROR(CheckAbandoned(abandoned));
    const PipelineSpec& spec = view.group->spec;
    cv::Mat destination(spec.output_height, spec.output_width, CV_8UC3, view.out);
    cv::Mat image;
    size_t applied = 0;
    if (view.request) {
      if (view.request->output == destination.size()) {
        image = destination;
      }
      spec.transforms.front()->ApplyToRegion(
          decoded(RegionWithin(view.request->region, decoded_region, decoded.size())),
          *view.request, image);
      applied = 1;
    } else {
      image = decoded.clone();  // the shared decoding stays as it is
    }
    for (size_t i = applied; i < spec.transforms.size(); ++i) {
      const Transform& transform = *spec.transforms[i];
      RETURN_IF_ERROR(
          CheckOutputPixels(transform, image.size(), transform.OutputSize(image.size()), options_));
      transform.Apply(image, view.rng);
    }
    if (image.data != destination.data) {
      if (image.size() != destination.size() || image.type() != CV_8UC3) {
        return absl::InternalError("pipeline produced a view of an unexpected shape");
      }
      image.copyTo(destination);
    }
  }
  if (timings != nullptr) {
    timings->decode_seconds += absl::ToDoubleSeconds(decoded_at - start);
    timings->augment_seconds += absl::ToDoubleSeconds(absl::Now() - decoded_at);
    timings->decode_warning = std::move(warning);
  }
  return absl::OkStatus();
}

void RunPipelinesOnCallerThreadsOnly() { cv::setNumThreads(0); }

std::string Pipeline::DecodePath(absl::string_view encoded) const {
  if (options_.region_decode) {
    const absl::StatusOr<std::optional<ImageHeader>> header = ReadHeader(encoded, options_);
    if (header.ok() && header->has_value()) {
      return RegionDecodePath(
          **header,
          /*whole_image=*/!groups_.front().spec.transforms.front()->PlansRegions());
    }
  }
  return "OpenCV: whole image";
}

std::string Pipeline::CanonicalSpec() const {
  std::vector<std::string> groups;
  for (const ViewGroup& group : groups_) {
    std::vector<std::string> parts = {group.spec.exact_decode ? "decode(exact)" : "decode(fast)"};
    for (const std::unique_ptr<Transform>& transform : group.spec.transforms) {
      parts.push_back(transform->Spec());
    }
    groups.push_back(multi_view() ? absl::StrCat(group.count, "*", absl::StrJoin(parts, "|"))
                                  : absl::StrJoin(parts, "|"));
  }
  return absl::StrJoin(groups, ";");
}

}  // namespace heterodl
