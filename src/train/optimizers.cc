#include "src/train/optimizers.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace heterodl {
namespace {

// The parameters of a group that have gradients, and those gradients.
struct WithGradients {
  std::vector<at::Tensor> parameters;
  std::vector<at::Tensor> gradients;
};

WithGradients Gather(torch::optim::OptimizerParamGroup& group) {
  WithGradients found;
  for (const at::Tensor& parameter : group.params()) {
    if (!parameter.grad().defined()) {
      continue;
    }
    found.parameters.push_back(parameter);
    found.gradients.push_back(parameter.grad());
  }
  return found;
}

// Runs `closure` with gradients on, as the optimizers of LibTorch do.
torch::Tensor Evaluate(const torch::optim::Optimizer::LossClosure& closure) {
  if (!closure) {
    return {};
  }
  torch::AutoGradMode enable(true);
  return closure();
}

}  // namespace

// NOLINTNEXTLINE(google-default-arguments): LibTorch's signature
torch::Tensor MultiTensorSgd::step(LossClosure closure) {
  torch::Tensor loss = Evaluate(closure);
  torch::NoGradGuard no_grad;
  for (torch::optim::OptimizerParamGroup& group : param_groups_) {
    const auto& options = static_cast<const torch::optim::SGDOptions&>(group.options());
    WithGradients live = Gather(group);
    if (live.parameters.empty()) {
      continue;
    }
    std::vector<at::Tensor> updates =
        options.weight_decay() != 0
            ? at::_foreach_add(live.gradients, live.parameters, options.weight_decay())
            : live.gradients;
    if (options.momentum() != 0) {
      // A parameter's first step starts its buffer at its update; the others
      // decay and accumulate together.
      std::vector<at::Tensor> buffers, continuing, continuing_updates;
      for (size_t i = 0; i < live.parameters.size(); ++i) {
        void* key = live.parameters[i].unsafeGetTensorImpl();
        auto it = state_.find(key);
        if (it == state_.end()) {
          auto state = std::make_unique<torch::optim::SGDParamState>();
          state->momentum_buffer(torch::clone(updates[i]).detach());
          buffers.push_back(state->momentum_buffer());
          state_[key] = std::move(state);
          continue;
        }
        const at::Tensor buffer =
            static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer();
        buffers.push_back(buffer);
        continuing.push_back(buffer);
        continuing_updates.push_back(updates[i]);
      }
      if (!continuing.empty()) {
        at::_foreach_mul_(continuing, options.momentum());
        at::_foreach_add_(continuing, continuing_updates, 1 - options.dampening());
      }
      updates = options.nesterov() ? at::_foreach_add(updates, buffers, options.momentum())
                                   : std::move(buffers);
    }
    at::_foreach_add_(live.parameters, updates, -options.lr());
  }
  return loss;
}

// NOLINTNEXTLINE(google-default-arguments): LibTorch's signature
torch::Tensor MultiTensorAdamW::step(LossClosure closure) {
  for (const torch::optim::OptimizerParamGroup& group : param_groups_) {
    if (static_cast<const torch::optim::AdamWOptions&>(group.options()).amsgrad()) {
      return torch::optim::AdamW::step(closure);
    }
  }
  torch::Tensor loss = Evaluate(closure);
  torch::NoGradGuard no_grad;
  for (torch::optim::OptimizerParamGroup& group : param_groups_) {
    const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
    WithGradients live = Gather(group);
    if (live.parameters.empty()) {
      continue;
    }
    const auto [beta1, beta2] = options.betas();
    std::vector<at::Tensor> averages, squares;
    std::vector<at::Scalar> step_sizes, root_corrections;
    for (const at::Tensor& parameter : live.parameters) {
      void* key = parameter.unsafeGetTensorImpl();
      auto it = state_.find(key);
      if (it == state_.end()) {
        auto state = std::make_unique<torch::optim::AdamWParamState>();
        state->exp_avg(torch::zeros_like(parameter, at::MemoryFormat::Preserve));
        state->exp_avg_sq(torch::zeros_like(parameter, at::MemoryFormat::Preserve));
        it = state_.emplace(key, std::move(state)).first;
      }
      auto& state = static_cast<torch::optim::AdamWParamState&>(*it->second);
      state.step(state.step() + 1);
      averages.push_back(state.exp_avg());
      squares.push_back(state.exp_avg_sq());
      const double correction1 = 1 - std::pow(beta1, static_cast<double>(state.step()));
      const double correction2 = 1 - std::pow(beta2, static_cast<double>(state.step()));
      step_sizes.emplace_back(-options.lr() / correction1);
      root_corrections.emplace_back(std::sqrt(correction2));
    }
    if (options.weight_decay() != 0) {
      at::_foreach_mul_(live.parameters, 1 - options.lr() * options.weight_decay());
    }
    at::_foreach_mul_(averages, beta1);
    at::_foreach_add_(averages, live.gradients, 1 - beta1);
    at::_foreach_mul_(squares, beta2);
    at::_foreach_addcmul_(squares, live.gradients, live.gradients, 1 - beta2);
    std::vector<at::Tensor> denominators = at::_foreach_sqrt(squares);
    at::_foreach_div_(denominators, root_corrections);
    at::_foreach_add_(denominators, options.eps());
    at::_foreach_addcdiv_(live.parameters, averages, denominators, step_sizes);
  }
  return loss;
}

std::unique_ptr<torch::optim::Optimizer> CreateOptimizer(
    const OptimizerSettings& settings, const std::vector<torch::Tensor>& parameters) {
  if (settings.kind == OptimizerKind::kAdamW) {
    return std::make_unique<MultiTensorAdamW>(
        parameters,
        torch::optim::AdamWOptions(settings.learning_rate).weight_decay(settings.weight_decay));
  }
  return std::make_unique<MultiTensorSgd>(parameters,
                                          torch::optim::SGDOptions(settings.learning_rate)
                                              .momentum(settings.momentum)
                                              .weight_decay(settings.weight_decay));
}

}  // namespace heterodl
