#include "augment/pipeline.h"

#include <utility>

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
                                        cv::Mat& destination, cv::Mat& image,
                                        std::string* warning) const {
  const JpegDamage damage = options_.strict_decode ? JpegDamage::kRefuse : JpegDamage::kDecode;
  if (options_.region_decode) {
    ASSIGN_OR_RETURN(const std::optional<ImageHeader> header, ReadHeader(encoded, options_));
    if (header) {
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
  return 0;
}

absl::Status Pipeline::Run(absl::string_view encoded, const SampleKey& key, uint8_t* out,
                           PipelineTimings* timings) const {
  CounterRng rng(key.seed, {kStreamAugment, key.epoch, static_cast<uint32_t>(key.index)});
  // Operations write into the caller's buffer where they can (resizes to the
  // output size, in-place flips); otherwise the result is copied at the end.
  cv::Mat destination(output_height_, output_width_, CV_8UC3, out);
  cv::Mat image;
  const absl::Time start = absl::Now();
  std::string warning;
  ASSIGN_OR_RETURN(const size_t applied, Decode(encoded, rng, destination, image, &warning));
  const absl::Time decoded = absl::Now();
  for (size_t i = applied; i < transforms_.size(); ++i) {
    transforms_[i]->Apply(image, rng);
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
