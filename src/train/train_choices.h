// The trainer's text choices as enums, each parsed once: the launcher parses
// its flags with these before anything starts or connects, and the trainer
// sees only the enums. Free of LibTorch (the launcher links it).
//
//   ASSIGN_OR_RETURN(const Precision precision, ParsePrecision(flag_value));
//   PrecisionName(precision);  // "bf16": what the flag takes
#ifndef HETERODL_SRC_TRAIN_TRAIN_CHOICES_H_
#define HETERODL_SRC_TRAIN_TRAIN_CHOICES_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace heterodl {

enum class OptimizerKind { kSgd, kAdamW };
// "auto": CUDA when present.
enum class DeviceKind { kAuto, kCpu, kCuda };
// "auto": bf16 autocast on CUDA, fp32 on CPU.
enum class Precision { kAuto, kFp32, kBf16 };
// How the model's convolution weights and its input lie in memory. "auto":
// channels_last on CUDA (2.2x faster ResNet-18 steps in bf16 on an H100,
// docs/benchmarks.md), contiguous on CPU.
enum class MemoryFormat { kAuto, kContiguous, kChannelsLast };

// Each: the flag's value ("sgd", "adamw"; "auto", "cpu", "cuda"; "auto",
// "fp32", "bf16"; "auto", "contiguous", "channels_last"), or INVALID_ARGUMENT naming
// the flag, the choices and the value ("--device must be one of auto, cpu,
// cuda; got 'tpu'"). The learning-rate schedule's is ParseLrScheduleKind
// (src/train/lr_schedule.h).
absl::StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view text);
absl::StatusOr<DeviceKind> ParseDeviceKind(absl::string_view text);
absl::StatusOr<Precision> ParsePrecision(absl::string_view text);
absl::StatusOr<MemoryFormat> ParseMemoryFormat(absl::string_view text);

// The flag value of each choice.
absl::string_view OptimizerKindName(OptimizerKind kind);
absl::string_view DeviceKindName(DeviceKind kind);
absl::string_view PrecisionName(Precision precision);
absl::string_view MemoryFormatName(MemoryFormat format);

}  // namespace heterodl

#endif  // HETERODL_SRC_TRAIN_TRAIN_CHOICES_H_
