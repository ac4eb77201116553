// Built-in models. Internal to src/train (includes LibTorch).
#ifndef HETERODL_SRC_TRAIN_MODELS_H_
#define HETERODL_SRC_TRAIN_MODELS_H_

#include <torch/nn/modules/container/any.h>

#include <string>

#include "absl/status/statusor.h"

namespace heterodl {

// "small_cnn": three strided 3x3 convolutions with batch norm, global average
// pooling and a linear classifier; for tests and the demo.
// Input float [B, 3, H, W], output logits [B, num_classes].
absl::StatusOr<torch::nn::AnyModule> CreateModel(const std::string& name, int num_classes);

}  // namespace heterodl

#endif  // HETERODL_SRC_TRAIN_MODELS_H_
