// The trainer's optimizers: SGD (momentum, weight decay) and AdamW whose
// step updates every parameter with a few multi-tensor kernels (ATen's
// _foreach_* ops, as torch.optim's foreach=True) instead of several kernels
// per parameter as LibTorch's C++ optimizers launch: ResNet-50's 161
// parameter tensors took ~800 launches per SGD step.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<torch::optim::Optimizer> optimizer,
//                    CreateOptimizer(settings, model->Parameters()));
//   loss.backward();
//   optimizer->step();
//
// Same math and the same state (momentum buffers; step, exp_avg, exp_avg_sq)
// as torch::optim::SGD and AdamW, which they derive from, so checkpoints are
// interchangeable and tests compare them step by step.
#ifndef HETERODL_SRC_TRAIN_OPTIMIZERS_H_
#define HETERODL_SRC_TRAIN_OPTIMIZERS_H_

#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/train/train_choices.h"

namespace heterodl {

class MultiTensorSgd final : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;
  // The default is LibTorch's own, so that `optimizer.step()` keeps working.
  // NOLINTNEXTLINE(google-default-arguments)
  torch::Tensor step(LossClosure closure = nullptr) override;
};

// amsgrad is left to AdamW's own step (per parameter).
class MultiTensorAdamW final : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  // NOLINTNEXTLINE(google-default-arguments)
  torch::Tensor step(LossClosure closure = nullptr) override;
};

struct OptimizerSettings {
  OptimizerKind kind = OptimizerKind::kSgd;
  double learning_rate = 0.1;
  double momentum = 0.9;       // sgd
  double weight_decay = 1e-4;  // sgd: L2; adamw: decoupled
};

std::unique_ptr<torch::optim::Optimizer> CreateOptimizer(
    const OptimizerSettings& settings, const std::vector<torch::Tensor>& parameters);

}  // namespace heterodl

#endif  // HETERODL_SRC_TRAIN_OPTIMIZERS_H_
