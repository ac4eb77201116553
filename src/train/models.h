// The models a rank can train, behind one small interface. Internal to
// src/train (includes LibTorch).
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Model> model, CreateModel("resnet50", 1000));
//   model->To(device);
//   torch::Tensor logits = model->Forward(input);  // float [B,3,H,W] -> [B, classes]
#ifndef HETERODL_SRC_TRAIN_MODELS_H_
#define HETERODL_SRC_TRAIN_MODELS_H_

#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace heterodl {

class Model {
 public:
  virtual ~Model() = default;
  virtual torch::Tensor Forward(const torch::Tensor& input) = 0;
  // Trainable parameters, in the same order on every rank and every run.
  virtual std::vector<torch::Tensor> Parameters() = 0;
  // State that is not trained by gradients (batch norm statistics), in a
  // stable order; checkpointed with the parameters.
  virtual std::vector<torch::Tensor> Buffers() = 0;
  virtual void SetTraining(bool training) = 0;
  virtual void To(const torch::Device& device) = 0;
};

// `name` is one of
//   "small_cnn"  three strided 3x3 convolutions with batch norm, global
//                average pooling and a linear classifier (tests, the demo);
//   "resnet18", "resnet50"  torchvision's architectures (v1.5: the stride of
//                a bottleneck is on its 3x3 convolution) and initialization;
//   a path to a TorchScript file (torch.jit.script or trace of a PyTorch
//                model, saved with .save()): "my model is in Python".
// Built-in models get `num_classes` outputs; a TorchScript model has its own.
absl::StatusOr<std::unique_ptr<Model>> CreateModel(const std::string& name, int num_classes);

// Lays out the model's 4-D parameters and buffers (convolution weights)
// channels-last (NHWC in memory), as PyTorch's
// model.to(memory_format=torch.channels_last): with channels-last input,
// cuDNN's fastest convolutions then need no layout conversions. The values,
// shapes and parameter order do not change.
void ToChannelsLast(Model& model);

}  // namespace heterodl

#endif  // HETERODL_SRC_TRAIN_MODELS_H_
