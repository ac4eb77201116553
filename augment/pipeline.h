// Pipeline: decode an encoded image and apply a chain of torchvision-style
// transforms, producing uint8 HWC RGB pixels of a fixed output size.
//
// A pipeline is written as text, the same everywhere (serve, local, bench,
// Python):
//
//   ASSIGN_OR_RETURN(Pipeline pipeline,
//                    Pipeline::Parse("random_resized_crop(224)|hflip(0.5)"));
//   std::vector<uint8_t> pixels(pipeline.output_bytes());
//   RETURN_IF_ERROR(pipeline.Run(jpeg_bytes, {seed, epoch, index},
//                                pixels.data()));
//
// Operations (see docs/pipeline.md); a size is N or HxW:
//   decode(fast|exact)  optional, first: JPEG decoding speed vs exactness
//   random_resized_crop(size[,scale=lo:hi][,ratio=lo:hi])
//   resize(size)        N: shorter side to N, aspect kept; HxW: exactly
//   center_crop(size)
//   random_crop(size[,padding][,pad_if_needed][,fill])
//   random_resize(min_size,max_size)   shorter side uniform in [min, max)
//   scale_jitter(target_size[,scale_range=lo:hi])
//   hflip(p)            horizontal flip with probability p
//   color_jitter(brightness, contrast, saturation, hue)
//   grayscale(p)
//   gaussian_blur(kernel_size[,sigma=lo:hi])
//   rotation(degrees | lo:hi)
//   affine(degrees[,translate][,scale][,shear][,fill])
//   solarize(threshold[,p]) posterize(bits[,p]) equalize(p) autocontrast(p)
//   adjust_sharpness(sharpness_factor[,p])
//   random_erasing([p][,scale][,ratio][,value])
//   rand_augment([num_ops][,magnitude][,num_magnitude_bins][,fill])
//   trivial_augment_wide([num_magnitude_bins][,fill])
//
// Several views of each sample (multi-crop self-supervised recipes): groups
// of COUNT*SPEC separated by ';', e.g.
//   2*random_resized_crop(224,scale=0.4:1)|hflip(0.5);8*random_resized_crop(96,scale=0.05:0.4)
// The image is decoded once per sample, only the region every view's first
// crop needs, at the largest scale any needs; each view is cut from it.
//
// Every random draw comes from a CounterRng keyed by (seed, epoch, index)
// (and the view), so a sample's output is bit-identical on any thread,
// process or server.
#ifndef HETERODL_AUGMENT_PIPELINE_H_
#define HETERODL_AUGMENT_PIPELINE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "augment/boxes.h"
#include "src/common/counter_rng.h"

namespace cv {
class Mat;  // only named by a private method: users never see OpenCV
}  // namespace cv

namespace heterodl {

// What a sample's randomness is keyed by.
struct SampleKey {
  uint64_t seed = 0;
  uint32_t epoch = 0;
  uint64_t index = 0;
};

class Transform;  // one operation of the chain; defined in transforms.h

// One group of views of a multi-view pipeline: `count` views of height x
// width x 3 bytes each.
struct ViewGroupShape {
  int count = 1;
  int height = 0;
  int width = 0;
  size_t view_bytes() const { return static_cast<size_t>(height) * width * 3; }
  size_t bytes() const { return view_bytes() * count; }
};

// The most views a sample may have, over all groups.
inline constexpr int kMaxViews = 64;

// A sample's segmentation mask (class ids), for Pipeline::Run to move with
// its image.
struct SegmentationMask {
  // Row-major ids, `bytes_per_id` (1 or 2) each, of the image's size as
  // decoded (width x height).
  const uint8_t* ids = nullptr;
  int width = 0;
  int height = 0;
  int bytes_per_id = 1;
  // What padding and rotation corners fill it with (torchvision's
  // segmentation references use 255).
  int ignore_index = 255;
  // Where the moved mask goes: output_height() x output_width() ids of
  // bytes_per_id.
  uint8_t* out = nullptr;
};

// A sample's detection boxes. Run() moves `boxes` (xyxy in the pixels of
// the image as decoded) with the image through every geometric operation,
// clipping them to it after each (augment/boxes.h); then keeps those
// PipelineOptions::min_box_size wide and high and at least
// min_box_visibility visible, in output pixels, in `kept`, and which input
// box each one is in `kept_indices`.
struct SampleBoxes {
  std::vector<Box> boxes;
  std::vector<Box> kept;
  std::vector<int> kept_indices;
};

// Where a Run() spent its time. "decode" includes the first crop or resize
// when the JPEG region path runs it fused with decoding.
struct PipelineTimings {
  double decode_seconds = 0;
  double augment_seconds = 0;
  // Set when the image was decoded around damage (PipelineOptions::
  // strict_decode off): what the decoder said, for the server to count.
  std::string decode_warning;
};

struct PipelineOptions {
  // Decode JPEG, PNG and WebP with their own libraries, only the region the
  // first crop/resize needs (region_decode.h). Off: always a full decode by
  // OpenCV (the reference the region paths are tested against).
  bool region_decode = true;
  // A PNG's pixel data inflated whole by libdeflate (png_decoder.h). Off:
  // libpng inflates it row by row, as before; for the benchmark's same-run
  // comparison.
  bool png_inflate_whole = true;
  // Images claiming more pixels are refused before decoding.
  int64_t max_pixels = 100'000'000;
  // A JPEG whose entropy-coded data is damaged but decodable (a scan that
  // ends early) is an error, replaced like any unreadable sample. Off (the
  // default): decoded as libjpeg fills it, as PIL and torchvision.io do, and
  // reported through PipelineTimings::decode_warning.
  bool strict_decode = false;
  // What padding and uncovered rotation corners fill a segmentation mask
  // with (SegmentationMask::ignore_index), for the server's batches of masks.
  int mask_ignore_index = 255;
  // Detection boxes narrower or lower than this after the operations are
  // dropped (torchvision's SanitizeBoundingBoxes' min_size), as are those
  // of which less than this fraction is left in the image (0: any part).
  double min_box_size = 1.0;
  double min_box_visibility = 0.0;
};

// The input a pipeline's cost is estimated on: the dataset's images are not
// known when a client names a pipeline, so every spec is priced on the same
// photo, 4:3 and 0.8 megapixels (larger than most of ImageNet's).
inline constexpr int kCostReferenceWidth = 1024;
inline constexpr int kCostReferenceHeight = 768;

// What one sample of a pipeline costs, estimated from its operations and the
// sizes of the images they work on (Transform::Cost): a server refuses a
// pipeline over its limit and shares its threads between clients by it.
struct PipelineCost {
  // Pixel operations per sample: pixels read or written times passes over
  // them, decoding included, on a kCostReferenceWidth x Height photo.
  double pixel_operations = 0;
  // The operation that costs most: its canonical spec, its place in the
  // spec (1 for the first after decode), what it costs and the size of the
  // image it works on.
  std::string costliest_operation;
  int costliest_position = 0;
  double costliest_pixel_operations = 0;
  int costliest_input_width = 0;
  int costliest_input_height = 0;
  // The most pixels any intermediate image has.
  double largest_image_pixels = 0;
};

// Each operation's fixed cost (a call, a pass set up), in pixel operations,
// so that a long chain of cheap operations still adds up.
inline constexpr double kOperationOverheadPixelOperations = 10'000;

class Pipeline {
 public:
  // Parses `spec`. Errors name the character position and the reason, e.g.
  // "pipeline spec: at 20: unknown operation 'hflp'". The last operation that
  // sets the size must give a fixed size (a crop), since a batch is a dense
  // [B,H,W,3] array. A spec of view groups ("2*A;8*B", at most kMaxViews
  // views) makes a multi-view pipeline.
  static absl::StatusOr<Pipeline> Parse(absl::string_view spec,
                                        const PipelineOptions& options = {});

  Pipeline(Pipeline&&) noexcept;
  Pipeline& operator=(Pipeline&&) noexcept;
  ~Pipeline();

  // Decodes `encoded` (JPEG, PNG, ... anything OpenCV reads) and writes
  // output_height() x output_width() x 3 RGB bytes to `out`. Returns
  // InvalidArgument for data that is not a decodable image, or an operation
  // that would make an image of more than PipelineOptions::max_pixels (a
  // resize of a very long image); never aborts. Once `abandoned` (optional)
  // is true, returns CANCELLED before decoding or the next operation: work
  // no one waits for stops early.
  // With `mask`, every geometric operation moves the mask exactly as the
  // image (nearest-neighbour; padding and uncovered corners are
  // mask->ignore_index) and photometric ones leave it alone; a mask whose
  // size is not the image's is INVALID_ARGUMENT (a bad sample).
  // With `boxes`, geometric operations move them too (SampleBoxes).
  // A multi-view pipeline writes every view of the sample to `out`, group
  // after group (output_bytes() in all); it takes no mask or boxes.
  absl::Status Run(absl::string_view encoded, const SampleKey& key, uint8_t* out,
                   PipelineTimings* timings = nullptr, const std::atomic<bool>* abandoned = nullptr,
                   const SegmentationMask* mask = nullptr, SampleBoxes* boxes = nullptr) const;

  // Every view of the sample: group g's count views, one after the other, to
  // `group_outputs[g]` (view_groups()[g].bytes()). Decodes once, the union of
  // the regions the views' first crops need at the largest scale any needs
  // (the whole image at full scale when a view starts with another
  // operation); view v draws from (seed, epoch, index) on stream
  // kStreamViewAugment + v. A single-view pipeline runs as Run() does.
  absl::Status RunViews(absl::string_view encoded, const SampleKey& key,
                        const std::vector<uint8_t*>& group_outputs,
                        PipelineTimings* timings = nullptr,
                        const std::atomic<bool>* abandoned = nullptr) const;

  // What Run() must decode of `encoded` at least, done and thrown away: the
  // entropy-coded data down to the region Run() would draw for `key`
  // (region_decode.h's DecodeRegionEntropyOnly), for `bench augment`'s
  // floor. Unimplemented for what has no such floor: PNG, WebP, files
  // OpenCV decodes, a multi-view pipeline.
  absl::Status DecodeEntropyOnly(absl::string_view encoded, const SampleKey& key) const;

  // The cost of one sample (see PipelineCost).
  PipelineCost EstimateCost() const;

  const PipelineOptions& options() const { return options_; }
  // The view groups, in spec order; one group of one view unless the spec
  // names several.
  const std::vector<ViewGroupShape>& view_groups() const { return shapes_; }
  bool multi_view() const { return shapes_.size() > 1 || shapes_.front().count > 1; }
  // The (first group's) view's size.
  int output_height() const { return shapes_.front().height; }
  int output_width() const { return shapes_.front().width; }
  // Bytes of every view of one sample.
  size_t output_bytes() const;
  // The spec in canonical form, every parameter written out.
  std::string CanonicalSpec() const;
  // How Run() decodes `encoded` (for reports), e.g. "libjpeg-turbo: region at
  // DCT scale" or "OpenCV: whole image".
  std::string DecodePath(absl::string_view encoded) const;

 private:
  Pipeline() = default;

  // Decodes `encoded` into `image` (RGB) and returns how many transforms
  // already ran (the first one, when the JPEG region path ran it fused with
  // decoding, writing into `destination` when sizes allow). `mask` (null:
  // none) must have the decoded image's size; a transform run fused moves it
  // too.
  absl::StatusOr<size_t> Decode(absl::string_view encoded, CounterRng& rng, cv::Mat& destination,
                                cv::Mat& image, std::string* warning, cv::Mat* mask,
                                MovingBoxes* boxes) const;

  // RunViews' work for a multi-view pipeline: the shared decode, then each
  // view.
  absl::Status RunMultiView(absl::string_view encoded, const SampleKey& key,
                            const std::vector<uint8_t*>& group_outputs, PipelineTimings* timings,
                            const std::atomic<bool>* abandoned) const;

  // One group's operations (pipeline.cc).
  struct ViewGroup;

  PipelineOptions options_;
  // decode(exact): libjpeg's accurate IDCT and fancy upsampling, as PIL
  // decodes; decode(fast) (default): its fast IDCT and merged upsampler.
  // A multi-view pipeline decodes exactly when any group asks to.
  bool exact_decode_ = false;
  std::vector<ViewGroup> groups_;
  std::vector<ViewGroupShape> shapes_;
};

// Pipelines run one sample per thread, many threads at once (a data
// server's pool, bench augment): OpenCV's own worker threads inside a resize
// would only contend with them. Call once per process before running them.
void RunPipelinesOnCallerThreadsOnly();

// The pipeline used when none is given.
inline constexpr absl::string_view kDefaultPipeline = "random_resized_crop(224)|hflip(0.5)";

}  // namespace heterodl

#endif  // HETERODL_AUGMENT_PIPELINE_H_
