#include "src/train/train_choices.h"

#include <array>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace heterodl {
namespace {

template <typename Enum, size_t N>
using Choices = std::array<std::pair<Enum, absl::string_view>, N>;

constexpr Choices<OptimizerKind, 2> kOptimizers = {
    {{OptimizerKind::kSgd, "sgd"}, {OptimizerKind::kAdamW, "adamw"}}};
constexpr Choices<DeviceKind, 3> kDevices = {
    {{DeviceKind::kAuto, "auto"}, {DeviceKind::kCpu, "cpu"}, {DeviceKind::kCuda, "cuda"}}};
constexpr Choices<Precision, 3> kPrecisions = {
    {{Precision::kAuto, "auto"}, {Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"}}};
constexpr Choices<MemoryFormat, 3> kMemoryFormats = {
    {{MemoryFormat::kAuto, "auto"},
     {MemoryFormat::kContiguous, "contiguous"},
     {MemoryFormat::kChannelsLast, "channels_last"}}};

template <typename Enum, size_t N>
absl::StatusOr<Enum> Parse(const Choices<Enum, N>& choices, absl::string_view flag,
                           absl::string_view text) {
  for (const auto& [value, name] : choices) {
    if (name == text) {
      return value;
    }
  }
  std::string names;
  for (const auto& [value, name] : choices) {
    absl::StrAppend(&names, names.empty() ? "" : ", ", name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be one of ", names, "; got '", text, "'"));
}

template <typename Enum, size_t N>
absl::string_view Name(const Choices<Enum, N>& choices, Enum value) {
  for (const auto& [choice, name] : choices) {
    if (choice == value) {
      return name;
    }
  }
  return "?";
}

}  // namespace

absl::StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view text) {
  return Parse(kOptimizers, "optimizer", text);
}
absl::StatusOr<DeviceKind> ParseDeviceKind(absl::string_view text) {
  return Parse(kDevices, "device", text);
}
absl::StatusOr<Precision> ParsePrecision(absl::string_view text) {
  return Parse(kPrecisions, "precision", text);
}
absl::StatusOr<MemoryFormat> ParseMemoryFormat(absl::string_view text) {
  return Parse(kMemoryFormats, "memory-format", text);
}

absl::string_view OptimizerKindName(OptimizerKind kind) { return Name(kOptimizers, kind); }
absl::string_view DeviceKindName(DeviceKind kind) { return Name(kDevices, kind); }
absl::string_view PrecisionName(Precision precision) { return Name(kPrecisions, precision); }
absl::string_view MemoryFormatName(MemoryFormat format) { return Name(kMemoryFormats, format); }

}  // namespace heterodl
