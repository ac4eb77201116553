// The multi-tensor optimizers against LibTorch's own, step by step.
#include "src/train/optimizers.h"

#include <torch/torch.h>

#include <functional>

#include "gtest/gtest.h"

namespace heterodl {
namespace {

// Parameters of several shapes (a conv weight, a bias, a matrix) and a
// parameter without a gradient, as a model's.
std::vector<torch::Tensor> MakeParameters(uint64_t seed) {
  torch::manual_seed(seed);
  return {torch::randn({8, 3, 3, 3}).requires_grad_(), torch::randn({8}).requires_grad_(),
          torch::randn({10, 8}).requires_grad_(), torch::randn({4}).requires_grad_()};
}

// Runs `steps` steps of `mine` and `theirs` on copies of the same
// parameters with the same gradients; the parameters must agree after each.
void ExpectSameSteps(
    const std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>&
        make_mine,
    const std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>&
        make_theirs,
    int steps = 6) {
  std::vector<torch::Tensor> a = MakeParameters(1);
  std::vector<torch::Tensor> b;
  b.reserve(a.size());
  for (const torch::Tensor& p : a) {
    b.push_back(p.detach().clone().requires_grad_());
  }
  std::unique_ptr<torch::optim::Optimizer> mine = make_mine(a);
  std::unique_ptr<torch::optim::Optimizer> theirs = make_theirs(b);
  for (int step = 0; step < steps; ++step) {
    torch::manual_seed(100 + step);
    for (size_t i = 0; i + 1 < a.size(); ++i) {  // the last one never gets a gradient
      const torch::Tensor gradient = torch::randn(a[i].sizes());
      a[i].mutable_grad() = gradient.clone();
      b[i].mutable_grad() = gradient.clone();
    }
    if (step == 3) {  // the learning rate changes mid-run, as schedules do
      for (auto* optimizer : {mine.get(), theirs.get()}) {
        for (auto& group : optimizer->param_groups()) {
          group.options().set_lr(0.05);
        }
      }
    }
    mine->step();
    theirs->step();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-6, 1e-7))
          << "step " << step << ", parameter " << i << ": max difference "
          << (a[i] - b[i]).abs().max().item<double>();
    }
  }
}

TEST(OptimizersTest, SgdWithMomentumAndWeightDecayMatchesLibTorch) {
  const auto options = torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-4);
  ExpectSameSteps([&](auto p) { return std::make_unique<MultiTensorSgd>(p, options); },
                  [&](auto p) { return std::make_unique<torch::optim::SGD>(p, options); });
}

TEST(OptimizersTest, SgdVariantsMatchLibTorch) {
  for (const auto& options :
       {torch::optim::SGDOptions(0.1), torch::optim::SGDOptions(0.1).momentum(0.8).dampening(0.1),
        torch::optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(5e-4)}) {
    ExpectSameSteps([&](auto p) { return std::make_unique<MultiTensorSgd>(p, options); },
                    [&](auto p) { return std::make_unique<torch::optim::SGD>(p, options); });
  }
}

TEST(OptimizersTest, AdamWMatchesLibTorch) {
  for (const auto& options :
       {torch::optim::AdamWOptions(1e-3).weight_decay(1e-2),
        torch::optim::AdamWOptions(3e-3).weight_decay(0).betas({0.8, 0.99})}) {
    ExpectSameSteps([&](auto p) { return std::make_unique<MultiTensorAdamW>(p, options); },
                    [&](auto p) { return std::make_unique<torch::optim::AdamW>(p, options); });
  }
}

TEST(OptimizersTest, StateIsLibTorchsSoCheckpointsCarryOver) {
  std::vector<torch::Tensor> a = MakeParameters(2);
  const auto options = torch::optim::SGDOptions(0.1).momentum(0.9);
  MultiTensorSgd mine(a, options);
  for (size_t i = 0; i + 1 < a.size(); ++i) {
    a[i].mutable_grad() = torch::ones(a[i].sizes());
  }
  mine.step();
  std::stringstream saved;
  torch::serialize::OutputArchive out;
  mine.save(out);
  out.save_to(saved);
  torch::optim::SGD theirs(a, options);
  torch::serialize::InputArchive in;
  in.load_from(saved);
  theirs.load(in);
  // One buffer per parameter that had a gradient, equal to it.
  EXPECT_EQ(theirs.state().size(), a.size() - 1);
  const auto& buffer =
      static_cast<torch::optim::SGDParamState&>(*theirs.state().at(a[0].unsafeGetTensorImpl()))
          .momentum_buffer();
  EXPECT_TRUE(torch::equal(buffer, torch::ones(a[0].sizes())));
}

TEST(OptimizersTest, EachKindIsItsOptimizer) {
  OptimizerSettings settings;
  settings.kind = OptimizerKind::kAdamW;
  EXPECT_NE(dynamic_cast<MultiTensorAdamW*>(CreateOptimizer(settings, MakeParameters(3)).get()),
            nullptr);
  settings.kind = OptimizerKind::kSgd;
  EXPECT_NE(dynamic_cast<MultiTensorSgd*>(CreateOptimizer(settings, MakeParameters(3)).get()),
            nullptr);
}

}  // namespace
}  // namespace heterodl
