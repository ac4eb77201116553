#include "src/train/models.h"

#include <torch/nn.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace heterodl {
namespace {

// Appends conv 3x3 / stride 2 + batch norm + ReLU to `sequence`.
void AddConvBlock(torch::nn::Sequential& sequence, int in_channels, int out_channels) {
  sequence->push_back(torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in_channels, out_channels, 3).stride(2).padding(1).bias(false)));
  sequence->push_back(torch::nn::BatchNorm2d(out_channels));
  sequence->push_back(torch::nn::ReLU(torch::nn::ReLUOptions(true)));
}

torch::nn::Sequential SmallCnnFeatures() {
  torch::nn::Sequential features;
  AddConvBlock(features, 3, 16);
  AddConvBlock(features, 16, 32);
  AddConvBlock(features, 32, 64);
  return features;
}

class SmallCnnImpl : public torch::nn::Module {
 public:
  explicit SmallCnnImpl(int num_classes)
      : features_(register_module("features", SmallCnnFeatures())),
        classifier_(register_module("classifier", torch::nn::Linear(64, num_classes))) {}

  torch::Tensor forward(torch::Tensor input) {
    torch::Tensor features = features_->forward(input);
    return classifier_->forward(features.mean({2, 3}));
  }

 private:
  torch::nn::Sequential features_;
  torch::nn::Linear classifier_;
};
TORCH_MODULE(SmallCnn);

}  // namespace

absl::StatusOr<torch::nn::AnyModule> CreateModel(const std::string& name, int num_classes) {
  if (num_classes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("model needs >= 1 class, got ", num_classes));
  }
  if (name == "small_cnn") return torch::nn::AnyModule(SmallCnn(num_classes));
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model '", name, "' (built in: small_cnn)"));
}

}  // namespace heterodl
