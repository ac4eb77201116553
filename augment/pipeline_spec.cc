#include "augment/pipeline_spec.h"

#include <cctype>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/common/status_macros.h"

namespace heterodl {
namespace {

// One argument as written: `value`, `lo:hi`, or `name=...` of either.
struct Argument {
  size_t position = 0;
  std::string name;  // empty for positional arguments
  double low = 0;
  double high = 0;
  bool is_range = false;
  // A size written HxW: `low` is H, `high` is W.
  bool is_size_pair = false;
  std::string word;  // for a word value, e.g. decode(exact)
};

struct Operation {
  size_t position = 0;
  std::string name;
  std::vector<Argument> arguments;
};

absl::Status SpecError(size_t position, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat("pipeline spec: at ", position, ": ", reason));
}

// Recursive-descent reader over the spec text, keeping the position of every
// token for error messages.
class SpecReader {
 public:
  explicit SpecReader(absl::string_view text) : text_(text) {}

  absl::StatusOr<std::vector<Operation>> ReadAll() {
    std::vector<Operation> operations;
    SkipSpace();
    if (AtEnd()) {
      return SpecError(0, "empty pipeline");
    }
    while (true) {
      ASSIGN_OR_RETURN(Operation operation, ReadOperation());
      operations.push_back(std::move(operation));
      SkipSpace();
      if (AtEnd()) {
        return operations;
      }
      if (!Consume('|')) {
        return SpecError(pos_, "expected '|' between operations");
      }
    }
  }

 private:
  absl::StatusOr<Operation> ReadOperation() {
    SkipSpace();
    Operation operation;
    operation.position = pos_;
    operation.name = ReadName();
    if (operation.name.empty()) {
      return SpecError(pos_, "expected an operation name");
    }
    SkipSpace();
    if (!Consume('(')) {
      return SpecError(pos_, absl::StrCat("expected '(' after '", operation.name, "'"));
    }
    SkipSpace();
    if (Consume(')')) {
      return operation;
    }
    while (true) {
      ASSIGN_OR_RETURN(Argument argument, ReadArgument());
      operation.arguments.push_back(std::move(argument));
      SkipSpace();
      if (Consume(')')) {
        return operation;
      }
      if (!Consume(',')) {
        return SpecError(pos_, "expected ',' or ')'");
      }
    }
  }

  absl::StatusOr<Argument> ReadArgument() {
    SkipSpace();
    Argument argument;
    argument.position = pos_;
    if (pos_ < text_.size() && std::isalpha(static_cast<unsigned char>(text_[pos_]))) {
      std::string name = ReadName();
      SkipSpace();
      if (!Consume('=')) {
        argument.word = std::move(name);  // a positional word value
        return argument;
      }
      argument.name = std::move(name);
      SkipSpace();
      if (pos_ < text_.size() && std::isalpha(static_cast<unsigned char>(text_[pos_]))) {
        argument.word = ReadName();
        return argument;
      }
    }
    ASSIGN_OR_RETURN(argument.low, ReadNumber());
    argument.high = argument.low;
    if (pos_ + 1 < text_.size() && text_[pos_] == 'x' &&
        std::isdigit(static_cast<unsigned char>(text_[pos_ + 1]))) {
      ++pos_;
      ASSIGN_OR_RETURN(argument.high, ReadNumber());
      argument.is_size_pair = true;
      return argument;
    }
    SkipSpace();
    if (Consume(':')) {
      ASSIGN_OR_RETURN(argument.high, ReadNumber());
      argument.is_range = true;
    }
    return argument;
  }

  absl::StatusOr<double> ReadNumber() {
    SkipSpace();
    const size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isdigit(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '.' ||
            text_[pos_] == '-' || text_[pos_] == '+' || text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
    }
    double value = 0;
    if (start == pos_ || !absl::SimpleAtod(text_.substr(start, pos_ - start), &value)) {
      return SpecError(start, "expected a number");
    }
    return value;
  }

  std::string ReadName() {
    const size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) {
      ++pos_;
    }
    return std::string(text_.substr(start, pos_ - start));
  }

  void SkipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }
  bool Consume(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool AtEnd() const { return pos_ >= text_.size(); }

  absl::string_view text_;
  size_t pos_ = 0;
};

// Binds an operation's arguments to named parameters, positional first.
class ArgumentBinder {
 public:
  ArgumentBinder(const Operation& operation, std::vector<std::string> names)
      : operation_(operation), names_(std::move(names)), bound_(names_.size()) {}

  absl::Status Bind() {
    size_t next_positional = 0;
    for (const Argument& argument : operation_.arguments) {
      size_t slot = names_.size();
      if (argument.name.empty()) {
        slot = next_positional++;
        if (slot >= names_.size()) {
          return SpecError(argument.position, absl::StrCat(operation_.name, " takes at most ",
                                                           names_.size(), " parameters"));
        }
      } else {
        for (size_t i = 0; i < names_.size(); ++i) {
          if (names_[i] == argument.name) {
            slot = i;
          }
        }
        if (slot == names_.size()) {
          return SpecError(argument.position,
                           absl::StrCat(operation_.name, " has no parameter '", argument.name,
                                        "' (it takes ", absl::StrJoin(names_, ", "), ")"));
        }
      }
      if (!argument.word.empty() && names_[slot] != "pad_if_needed" && names_[slot] != "value") {
        return SpecError(
            argument.position,
            absl::StrCat("'", names_[slot], "' takes a number, not '", argument.word, "'"));
      }
      if (bound_[slot] != nullptr) {
        return SpecError(argument.position,
                         absl::StrCat("parameter '", names_[slot], "' given twice"));
      }
      bound_[slot] = &argument;
    }
    return absl::OkStatus();
  }

  const Argument* Get(size_t slot) const { return bound_[slot]; }

  // An error naming the parameter when `slot` was not given.
  absl::Status Require(size_t slot) const {
    if (bound_[slot] == nullptr) {
      return SpecError(operation_.position,
                       absl::StrCat(operation_.name, " needs '", names_[slot], "'"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int> Size(size_t slot, bool required) const {
    const Argument* argument = bound_[slot];
    if (argument == nullptr) {
      if (required) {
        return Require(slot);
      }
      return 0;
    }
    if (argument->is_range || argument->is_size_pair || !IsSide(argument->low)) {
      return SpecError(argument->position,
                       absl::StrCat("'", names_[slot], "' must be an integer in [1, 8192]"));
    }
    return static_cast<int>(argument->low);
  }

  // A size "N" (N x N) or "HxW", each side an integer in [1, 8192]; as a
  // cv::Size, (W, H). Sets `*pair` to whether it was written HxW.
  absl::StatusOr<cv::Size> SizeOrPair(size_t slot, bool* pair = nullptr) const {
    RETURN_IF_ERROR(Require(slot));
    const Argument* argument = bound_[slot];
    if (argument->is_range || !IsSide(argument->low) || !IsSide(argument->high)) {
      return SpecError(
          argument->position,
          absl::StrCat("'", names_[slot], "' must be an integer in [1, 8192], or HxW of two"));
    }
    if (pair != nullptr) {
      *pair = argument->is_size_pair;
    }
    return cv::Size(static_cast<int>(argument->high), static_cast<int>(argument->low));
  }

  // An integer in [0, max].
  absl::StatusOr<int> Count(size_t slot, int fallback, int max) const {
    const Argument* argument = bound_[slot];
    if (argument == nullptr) {
      return fallback;
    }
    if (argument->is_range || argument->is_size_pair || !(argument->low >= 0) ||
        !(argument->low <= max) || argument->low != std::floor(argument->low)) {
      return SpecError(argument->position,
                       absl::StrCat("'", names_[slot], "' must be an integer in [0, ", max, "]"));
    }
    return static_cast<int>(argument->low);
  }

  // true/false, or 1/0.
  absl::StatusOr<bool> Flag(size_t slot, bool fallback) const {
    const Argument* argument = bound_[slot];
    if (argument == nullptr) {
      return fallback;
    }
    if (argument->word == "true" || argument->word == "false") {
      return argument->word == "true";
    }
    if (argument->word.empty() && !argument->is_range && !argument->is_size_pair &&
        (argument->low == 0 || argument->low == 1)) {
      return argument->low == 1;
    }
    return SpecError(argument->position,
                     absl::StrCat("'", names_[slot], "' must be true or false"));
  }

  // Range first: converting an out-of-range double to int is undefined
  // (found by the fuzzer with a 60-digit size).
  static bool IsSide(double value) {
    return value >= 1 && value <= 8192 && value == std::floor(value);
  }

  absl::StatusOr<double> Probability(size_t slot, double fallback) const {
    const Argument* argument = bound_[slot];
    if (argument == nullptr) {
      return fallback;
    }
    if (argument->is_range || argument->low < 0 || argument->low > 1) {
      return SpecError(argument->position,
                       absl::StrCat("'", names_[slot], "' must be a probability in [0, 1]"));
    }
    return argument->low;
  }

  absl::StatusOr<double> NonNegative(size_t slot, double fallback, double max) const {
    const Argument* argument = bound_[slot];
    if (argument == nullptr) {
      return fallback;
    }
    if (argument->is_range || argument->low < 0 || argument->low > max) {
      return SpecError(argument->position,
                       absl::StrCat("'", names_[slot], "' must be a number in [0, ", max, "]"));
    }
    return argument->low;
  }

  // A range lo:hi, or one value v meaning -v:v (symmetric) or v:v (not).
  absl::StatusOr<Range> RangeOrValue(size_t slot, Range fallback, bool symmetric) const {
    const Argument* argument = bound_[slot];
    if (argument == nullptr) {
      return fallback;
    }
    if (argument->is_range) {
      if (argument->high < argument->low) {
        return SpecError(argument->position,
                         absl::StrCat("'", names_[slot], "' must be a range lo:hi with lo <= hi"));
      }
      return Range{argument->low, argument->high};
    }
    if (symmetric) {
      if (argument->low < 0) {
        return SpecError(argument->position, absl::StrCat("'", names_[slot], "' must be >= 0"));
      }
      return Range{-argument->low, argument->low};
    }
    return Range{argument->low, argument->low};
  }

  absl::StatusOr<Range> PositiveRange(size_t slot, Range fallback) const {
    const Argument* argument = bound_[slot];
    if (argument == nullptr) {
      return fallback;
    }
    if (!argument->is_range || !(argument->low > 0) || argument->high < argument->low) {
      return SpecError(
          argument->position,
          absl::StrCat("'", names_[slot], "' must be a range lo:hi with 0 < lo <= hi"));
    }
    return Range{argument->low, argument->high};
  }

 private:
  const Operation& operation_;
  std::vector<std::string> names_;
  std::vector<const Argument*> bound_;
};

using TransformOrError = absl::StatusOr<std::unique_ptr<Transform>>;

TransformOrError RandomResizedCropFrom(const Operation& operation) {
  ArgumentBinder binder(operation, {"size", "scale", "ratio"});
  RETURN_IF_ERROR(binder.Bind());
  ASSIGN_OR_RETURN(cv::Size size, binder.SizeOrPair(0));
  ASSIGN_OR_RETURN(Range scale, binder.PositiveRange(1, {0.08, 1.0}));
  ASSIGN_OR_RETURN(Range ratio, binder.PositiveRange(2, {3.0 / 4.0, 4.0 / 3.0}));
  if (scale.high > 1.0) {
    return SpecError(binder.Get(1)->position, "'scale' must lie within (0, 1]");
  }
  return MakeRandomResizedCrop(size, scale, ratio);
}

// resize(N): the shorter side; resize(HxW): exactly.
TransformOrError ResizeFrom(const Operation& operation) {
  ArgumentBinder binder(operation, {"size"});
  RETURN_IF_ERROR(binder.Bind());
  bool pair = false;
  ASSIGN_OR_RETURN(cv::Size size, binder.SizeOrPair(0, &pair));
  return pair ? MakeResizeTo(size) : MakeResize(size.width);
}

TransformOrError CenterCropFrom(const Operation& operation) {
  ArgumentBinder binder(operation, {"size"});
  RETURN_IF_ERROR(binder.Bind());
  ASSIGN_OR_RETURN(cv::Size size, binder.SizeOrPair(0));
  return MakeCenterCrop(size);
}

TransformOrError RandomCropFrom(const Operation& operation) {
  ArgumentBinder binder(operation, {"size", "padding", "pad_if_needed", "fill"});
  RETURN_IF_ERROR(binder.Bind());
  ASSIGN_OR_RETURN(cv::Size size, binder.SizeOrPair(0));
  ASSIGN_OR_RETURN(int padding, binder.Count(1, 0, 8192));
  ASSIGN_OR_RETURN(bool pad_if_needed, binder.Flag(2, false));
  ASSIGN_OR_RETURN(int fill, binder.Count(3, 0, 255));
  return MakeRandomCrop(size, padding, pad_if_needed, fill);
}

TransformOrError RandomResizeFrom(const Operation& operation) {
  ArgumentBinder binder(operation, {"min_size", "max_size"});
  RETURN_IF_ERROR(binder.Bind());
  ASSIGN_OR_RETURN(int min_size, binder.Size(0, /*required=*/true));
  ASSIGN_OR_RETURN(int max_size, binder.Size(1, /*required=*/true));
  if (max_size <= min_size) {
    return SpecError(binder.Get(1)->position,
                     "'max_size' must be more than 'min_size' (it is excluded, as in torchvision)");
  }
  return MakeRandomResize(min_size, max_size);
}

TransformOrError ScaleJitterFrom(const Operation& operation) {
  ArgumentBinder binder(operation, {"target_size", "scale_range"});
  RETURN_IF_ERROR(binder.Bind());
  ASSIGN_OR_RETURN(cv::Size target, binder.SizeOrPair(0));
  ASSIGN_OR_RETURN(Range scale, binder.PositiveRange(1, {0.1, 2.0}));
  if (scale.high > 8) {
    return SpecError(binder.Get(1)->position, "'scale_range' must lie within (0, 8]");
  }
  return MakeScaleJitter(target, scale);
}

// hflip(p) and grayscale(p): one probability.
TransformOrError WithProbability(const Operation& operation, double fallback,
                                 std::unique_ptr<Transform> (*make)(double)) {
  ArgumentBinder binder(operation, {"p"});
  RETURN_IF_ERROR(binder.Bind());
  ASSIGN_OR_RETURN(double p, binder.Probability(0, fallback));
  return make(p);
}
TransformOrError HorizontalFlipFrom(const Operation& operation) {
  return WithProbability(operation, 0.5, &MakeHorizontalFlip);
}
TransformOrError GrayscaleFrom(const Operation& operation) {
  return WithProbability(operation, 0.1, &MakeRandomGrayscale);
}

TransformOrError ColorJitterFrom(const Operation& operation) {
  ArgumentBinder binder(operation, {"brightness", "contrast", "saturation", "hue", "p"});
  RETURN_IF_ERROR(binder.Bind());
  ASSIGN_OR_RETURN(double brightness, binder.NonNegative(0, 0, 100));
  ASSIGN_OR_RETURN(double contrast, binder.NonNegative(1, 0, 100));
  ASSIGN_OR_RETURN(double saturation, binder.NonNegative(2, 0, 100));
  ASSIGN_OR_RETURN(double hue, binder.NonNegative(3, 0, 0.5));
  ASSIGN_OR_RETURN(double p, binder.Probability(4, 1.0));
  return MakeColorJitter(brightness, contrast, saturation, hue, p);
}

TransformOrError GaussianBlurFrom(const Operation& operation) {
  ArgumentBinder binder(operation, {"kernel_size", "sigma", "p"});
  RETURN_IF_ERROR(binder.Bind());
  ASSIGN_OR_RETURN(int kernel, binder.Size(0, /*required=*/true));
  if (kernel % 2 == 0 || kernel > 255) {
    return SpecError(binder.Get(0)->position, "'kernel_size' must be odd and at most 255");
  }
  ASSIGN_OR_RETURN(Range sigma, binder.RangeOrValue(1, {0.1, 2.0}, /*symmetric=*/false));
  if (!(sigma.low > 0) || !(sigma.high <= 1000)) {
    return SpecError(binder.Get(1)->position, "'sigma' must lie within (0, 1000]");
  }
  ASSIGN_OR_RETURN(double p, binder.Probability(2, 1.0));
  return MakeGaussianBlur(kernel, sigma, p);
}

TransformOrError SolarizeFrom(const Operation& operation) {
  ArgumentBinder binder(operation, {"threshold", "p"});
  RETURN_IF_ERROR(binder.Bind());
  RETURN_IF_ERROR(binder.Require(0));
  ASSIGN_OR_RETURN(double threshold, binder.NonNegative(0, 0, 255));
  ASSIGN_OR_RETURN(double p, binder.Probability(1, 0.5));
  return MakeRandomSolarize(threshold, p);
}

TransformOrError PosterizeFrom(const Operation& operation) {
  ArgumentBinder binder(operation, {"bits", "p"});
  RETURN_IF_ERROR(binder.Bind());
  RETURN_IF_ERROR(binder.Require(0));
  ASSIGN_OR_RETURN(int bits, binder.Count(0, 8, 8));
  ASSIGN_OR_RETURN(double p, binder.Probability(1, 0.5));
  return MakeRandomPosterize(bits, p);
}

// equalize(p) and autocontrast(p): torchvision's default p is 0.5.
TransformOrError EqualizeFrom(const Operation& operation) {
  return WithProbability(operation, 0.5, &MakeRandomEqualize);
}
TransformOrError AutocontrastFrom(const Operation& operation) {
  return WithProbability(operation, 0.5, &MakeRandomAutocontrast);
}

TransformOrError AdjustSharpnessFrom(const Operation& operation) {
  ArgumentBinder binder(operation, {"sharpness_factor", "p"});
  RETURN_IF_ERROR(binder.Bind());
  RETURN_IF_ERROR(binder.Require(0));
  ASSIGN_OR_RETURN(double factor, binder.NonNegative(0, 1, 100));
  ASSIGN_OR_RETURN(double p, binder.Probability(1, 0.5));
  return MakeRandomAdjustSharpness(factor, p);
}

// affine(degrees[,translate=tx:ty or t][,scale=lo:hi][,shear=s or lo:hi][,fill]).
TransformOrError AffineFrom(const Operation& operation) {
  ArgumentBinder binder(operation, {"degrees", "translate", "scale", "shear", "fill"});
  RETURN_IF_ERROR(binder.Bind());
  RETURN_IF_ERROR(binder.Require(0));
  AffineRanges ranges;
  ASSIGN_OR_RETURN(ranges.degrees, binder.RangeOrValue(0, {0, 0}, /*symmetric=*/true));
  if (ranges.degrees.low < -360 || ranges.degrees.high > 360) {
    return SpecError(binder.Get(0)->position, "'degrees' must lie within [-360, 360]");
  }
  if (const Argument* translate = binder.Get(1); translate != nullptr) {
    // torchvision's (a, b): the largest shift, as a fraction of the width
    // and of the height. One value is both.
    if (translate->is_size_pair || !(translate->low >= 0 && translate->low <= 1) ||
        !(translate->high >= 0 && translate->high <= 1)) {
      return SpecError(translate->position,
                       "'translate' must be fractions a:b (width, height), each in [0, 1]");
    }
    ranges.translate_x = translate->low;
    ranges.translate_y = translate->high;
  }
  if (binder.Get(2) != nullptr) {
    ASSIGN_OR_RETURN(Range scale, binder.PositiveRange(2, {1, 1}));
    if (scale.high > 8) {
      return SpecError(binder.Get(2)->position, "'scale' must lie within (0, 8]");
    }
    ranges.scale = scale;
  }
  if (binder.Get(3) != nullptr) {
    ASSIGN_OR_RETURN(Range shear, binder.RangeOrValue(3, {0, 0}, /*symmetric=*/true));
    if (!(shear.low >= -80 && shear.high <= 80)) {
      return SpecError(binder.Get(3)->position, "'shear' must lie within [-80, 80] degrees");
    }
    ranges.shear = shear;
  }
  ASSIGN_OR_RETURN(int fill, binder.Count(4, 0, 255));
  return MakeRandomAffine(ranges, fill);
}

TransformOrError RandomErasingFrom(const Operation& operation) {
  ArgumentBinder binder(operation, {"p", "scale", "ratio", "value"});
  RETURN_IF_ERROR(binder.Bind());
  ASSIGN_OR_RETURN(double p, binder.Probability(0, 0.5));
  ASSIGN_OR_RETURN(Range scale, binder.PositiveRange(1, {0.02, 0.33}));
  if (scale.high > 1) {
    return SpecError(binder.Get(1)->position, "'scale' must lie within (0, 1]");
  }
  ASSIGN_OR_RETURN(Range ratio, binder.PositiveRange(2, {0.3, 3.3}));
  const Argument* value = binder.Get(3);
  if (value != nullptr && !value->word.empty()) {
    if (value->word != "random") {
      return SpecError(value->position, "'value' must be a byte in [0, 255] or random");
    }
    return MakeRandomErasing(p, scale, ratio, 0, /*random_value=*/true);
  }
  ASSIGN_OR_RETURN(int fill, binder.Count(3, 0, 255));
  return MakeRandomErasing(p, scale, ratio, fill, /*random_value=*/false);
}

TransformOrError RandAugmentFrom(const Operation& operation) {
  ArgumentBinder binder(operation, {"num_ops", "magnitude", "num_magnitude_bins", "fill"});
  RETURN_IF_ERROR(binder.Bind());
  ASSIGN_OR_RETURN(int num_ops, binder.Count(0, 2, 16));
  ASSIGN_OR_RETURN(int bins, binder.Count(2, 31, 1000));
  if (bins < 2) {
    return SpecError(binder.Get(2)->position, "'num_magnitude_bins' must be at least 2");
  }
  ASSIGN_OR_RETURN(int magnitude, binder.Count(1, 9, bins - 1));
  ASSIGN_OR_RETURN(int fill, binder.Count(3, 0, 255));
  return MakeRandAugment(num_ops, magnitude, bins, fill);
}

TransformOrError TrivialAugmentWideFrom(const Operation& operation) {
  ArgumentBinder binder(operation, {"num_magnitude_bins", "fill"});
  RETURN_IF_ERROR(binder.Bind());
  ASSIGN_OR_RETURN(int bins, binder.Count(0, 31, 1000));
  if (bins < 2) {
    return SpecError(binder.Get(0)->position, "'num_magnitude_bins' must be at least 2");
  }
  ASSIGN_OR_RETURN(int fill, binder.Count(1, 0, 255));
  return MakeTrivialAugmentWide(bins, fill);
}

TransformOrError RotationFrom(const Operation& operation) {
  ArgumentBinder binder(operation, {"degrees"});
  RETURN_IF_ERROR(binder.Bind());
  RETURN_IF_ERROR(binder.Require(0));
  ASSIGN_OR_RETURN(Range degrees, binder.RangeOrValue(0, {0, 0}, /*symmetric=*/true));
  if (degrees.low < -360 || degrees.high > 360) {
    return SpecError(binder.Get(0)->position, "'degrees' must lie within [-360, 360]");
  }
  return MakeRandomRotation(degrees);
}

// Every operation a spec may name, in the order the error message lists them.
constexpr std::pair<const char*, TransformOrError (*)(const Operation&)> kOperations[] = {
    {"random_resized_crop", &RandomResizedCropFrom},
    {"resize", &ResizeFrom},
    {"center_crop", &CenterCropFrom},
    {"random_crop", &RandomCropFrom},
    {"random_resize", &RandomResizeFrom},
    {"scale_jitter", &ScaleJitterFrom},
    {"hflip", &HorizontalFlipFrom},
    {"color_jitter", &ColorJitterFrom},
    {"grayscale", &GrayscaleFrom},
    {"gaussian_blur", &GaussianBlurFrom},
    {"rotation", &RotationFrom},
    {"affine", &AffineFrom},
    {"solarize", &SolarizeFrom},
    {"posterize", &PosterizeFrom},
    {"equalize", &EqualizeFrom},
    {"autocontrast", &AutocontrastFrom},
    {"adjust_sharpness", &AdjustSharpnessFrom},
    {"random_erasing", &RandomErasingFrom},
    {"rand_augment", &RandAugmentFrom},
    {"trivial_augment_wide", &TrivialAugmentWideFrom},
};

TransformOrError MakeTransform(const Operation& operation) {
  std::vector<std::string> known;
  for (const auto& [name, make] : kOperations) {
    if (operation.name == name) {
      return make(operation);
    }
    known.push_back(name);
  }
  return SpecError(operation.position, absl::StrCat("unknown operation '", operation.name,
                                                    "' (known: ", absl::StrJoin(known, ", "), ")"));
}

}  // namespace

absl::StatusOr<PipelineSpec> ParsePipelineSpec(absl::string_view spec) {
  ASSIGN_OR_RETURN(std::vector<Operation> operations, SpecReader(spec).ReadAll());
  // ReadAll never returns an empty list.
  PipelineSpec parsed;
  // decode(fast|exact) may lead the pipeline; it sets how JPEGs are decoded.
  if (operations.front().name == "decode") {
    const Operation& decode = operations.front();
    if (decode.arguments.size() != 1 || decode.arguments[0].word.empty() ||
        (decode.arguments[0].word != "fast" && decode.arguments[0].word != "exact")) {
      return SpecError(decode.position, "decode takes one mode: decode(fast) or decode(exact)");
    }
    parsed.exact_decode = decode.arguments[0].word == "exact";
    operations.erase(operations.begin());
    if (operations.empty()) {
      return SpecError(spec.size(), "nothing after decode(...)");
    }
  }
  // The output size is set by the last operation that changes the size; it
  // must be a fixed-size one.
  cv::Size output(0, 0);
  for (const Operation& operation : operations) {
    if (operation.name == "decode") {
      return SpecError(operation.position, "decode(...) must come first");
    }
    ASSIGN_OR_RETURN(std::unique_ptr<Transform> transform, MakeTransform(operation));
    const cv::Size fixed = transform->FixedOutputSize();
    if (fixed.area() > 0) {
      output = fixed;
    } else if (operation.name == "resize" || operation.name == "random_resize" ||
               operation.name == "scale_jitter") {
      output = {0, 0};
    }
    parsed.transforms.push_back(std::move(transform));
  }
  if (output.area() == 0) {
    return SpecError(spec.size(),
                     "the pipeline must give a fixed output size: end it with "
                     "random_resized_crop(...), center_crop(...), random_crop(...) or "
                     "resize(HxW)");
  }
  parsed.output_width = output.width;
  parsed.output_height = output.height;
  return parsed;
}

}  // namespace heterodl
