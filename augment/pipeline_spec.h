// The pipeline spec language: "random_resized_crop(224)|hflip(0.5)" read into
// the transforms it names, every argument bound and checked. Internal to
// augment/ (users write specs; Pipeline::Parse reads them through this).
//
// Grammar: operations separated by '|'; each `name(arguments)`, arguments
// separated by ',', each a number, a range `lo:hi`, a size `HxW`, a word,
// or `name=` one of those. Errors name the character position and the reason, e.g.
// "pipeline spec: at 20: unknown operation 'hflp'".
#ifndef HETERODL_AUGMENT_PIPELINE_SPEC_H_
#define HETERODL_AUGMENT_PIPELINE_SPEC_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "augment/transforms.h"

namespace heterodl {

struct PipelineSpec {
  // decode(exact) led the spec (decode(fast), the default, or nothing did).
  bool exact_decode = false;
  std::vector<std::unique_ptr<Transform>> transforms;
  // Set by the last operation that fixes the size (a crop): a batch is a
  // dense [B, H, W, 3] array, so a spec without one is refused.
  int output_height = 0;
  int output_width = 0;
};

// INVALID_ARGUMENT naming the position and the reason for anything that is
// not a valid spec; never aborts (it is fuzzed, tests/fuzz/).
absl::StatusOr<PipelineSpec> ParsePipelineSpec(absl::string_view spec);

}  // namespace heterodl

#endif  // HETERODL_AUGMENT_PIPELINE_SPEC_H_
