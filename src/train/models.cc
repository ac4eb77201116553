#include "src/train/models.h"

#include <torch/nn.h>
#include <torch/script.h>

#include <array>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace heterodl {
namespace {

namespace nn = torch::nn;

nn::Conv2d Conv(int in_channels, int out_channels, int kernel, int stride, int padding) {
  return nn::Conv2d(nn::Conv2dOptions(in_channels, out_channels, kernel)
                        .stride(stride)
                        .padding(padding)
                        .bias(false));
}

// ---- small_cnn ----

torch::nn::Sequential SmallCnnFeatures() {
  torch::nn::Sequential features;
  const int widths[] = {3, 16, 32, 64};
  for (int i = 0; i < 3; ++i) {
    features->push_back(Conv(widths[i], widths[i + 1], 3, 2, 1));
    features->push_back(nn::BatchNorm2d(widths[i + 1]));
    features->push_back(nn::ReLU(nn::ReLUOptions(true)));
  }
  return features;
}

class SmallCnnImpl : public nn::Module {
 public:
  explicit SmallCnnImpl(int num_classes)
      : features_(register_module("features", SmallCnnFeatures())),
        classifier_(register_module("classifier", nn::Linear(64, num_classes))) {}

  torch::Tensor forward(const torch::Tensor& input) {
    return classifier_->forward(features_->forward(input).mean({2, 3}));
  }

 private:
  nn::Sequential features_;
  nn::Linear classifier_;
};
TORCH_MODULE(SmallCnn);

// ---- ResNet, as torchvision builds it ----

// conv1x1 + batch norm when a block changes resolution or width.
nn::Sequential Downsample(int in_channels, int out_channels, int stride) {
  nn::Sequential downsample;
  downsample->push_back(Conv(in_channels, out_channels, 1, stride, 0));
  downsample->push_back(nn::BatchNorm2d(out_channels));
  return downsample;
}

// One convolution of a residual block.
struct BlockLayer {
  int kernel;  // 1 or 3; padded to keep the size
  int out_channels;
  int stride;
};

// A residual block as torchvision builds both kinds: convolutions conv1,
// conv2, ... each followed by its batch norm (bn1, bn2, ...) and, but for
// the last, a ReLU; plus the shortcut, x itself or, when the block changes
// resolution or width, x through `downsample`; then the sum's ReLU.
// Modules are registered in torchvision's order, so parameters line up.
class ResidualBlockImpl : public nn::Module {
 public:
  ResidualBlockImpl(int in_channels, const std::vector<BlockLayer>& layers) {
    int channels = in_channels;
    int stride = 1;
    for (size_t i = 0; i < layers.size(); ++i) {
      const BlockLayer& layer = layers[i];
      const std::string number = std::to_string(i + 1);
      convs_.push_back(register_module(
          "conv" + number,
          Conv(channels, layer.out_channels, layer.kernel, layer.stride, layer.kernel / 2)));
      norms_.push_back(register_module("bn" + number, nn::BatchNorm2d(layer.out_channels)));
      channels = layer.out_channels;
      stride *= layer.stride;
    }
    if (stride != 1 || in_channels != channels) {
      downsample_ = register_module("downsample", Downsample(in_channels, channels, stride));
    }
  }

  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor out = x;
    for (size_t i = 0; i < convs_.size(); ++i) {
      out = norms_[i]->forward(convs_[i]->forward(out));
      if (i + 1 < convs_.size()) {
        out = torch::relu(out);
      }
    }
    out += downsample_ ? downsample_->forward(x) : x;
    return torch::relu(out);
  }

 private:
  std::vector<nn::Conv2d> convs_;
  std::vector<nn::BatchNorm2d> norms_;
  nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(ResidualBlock);

// ResNet-18's block: two 3x3 convolutions, the first strided.
struct BasicBlock {
  static constexpr int kExpansion = 1;
  static ResidualBlock Make(int in_channels, int planes, int stride) {
    return ResidualBlock(in_channels, std::vector<BlockLayer>{{3, planes, stride}, {3, planes, 1}});
  }
};

// ResNet-50's: 1x1 down to `planes`, 3x3 (strided there, as torchvision
// does), 1x1 up to planes x 4.
struct Bottleneck {
  static constexpr int kExpansion = 4;
  static ResidualBlock Make(int in_channels, int planes, int stride) {
    return ResidualBlock(
        in_channels,
        std::vector<BlockLayer>{{1, planes, 1}, {3, planes, stride}, {1, planes * kExpansion, 1}});
  }
};

template <typename Block>
class ResNetImpl : public nn::Module {
 public:
  ResNetImpl(const std::array<int, 4>& blocks, int num_classes)
      : conv1_(register_module("conv1", Conv(3, 64, 7, 2, 3))),
        bn1_(register_module("bn1", nn::BatchNorm2d(64))),
        layer1_(register_module("layer1", MakeLayer(64, blocks[0], 1))),
        layer2_(register_module("layer2", MakeLayer(128, blocks[1], 2))),
        layer3_(register_module("layer3", MakeLayer(256, blocks[2], 2))),
        layer4_(register_module("layer4", MakeLayer(512, blocks[3], 2))),
        fc_(register_module("fc", nn::Linear(512 * Block::kExpansion, num_classes))) {
    // torchvision's initialization: He (fan out) for convolutions, batch
    // norm as identity; the linear layer keeps its default.
    for (auto& module : modules(/*include_self=*/false)) {
      if (auto* conv = module->template as<nn::Conv2d>()) {
        nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
      } else if (auto* bn = module->template as<nn::BatchNorm2d>()) {
        nn::init::ones_(bn->weight);
        nn::init::zeros_(bn->bias);
      }
    }
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(bn1_->forward(conv1_->forward(x)));
    x = torch::max_pool2d(x, 3, 2, 1);
    x = layer4_->forward(layer3_->forward(layer2_->forward(layer1_->forward(x))));
    return fc_->forward(torch::flatten(torch::adaptive_avg_pool2d(x, {1, 1}), 1));
  }

 private:
  nn::Sequential MakeLayer(int planes, int blocks, int stride) {
    nn::Sequential layer;
    layer->push_back(Block::Make(in_channels_, planes, stride));
    in_channels_ = planes * Block::kExpansion;
    for (int i = 1; i < blocks; ++i) {
      layer->push_back(Block::Make(in_channels_, planes, 1));
    }
    return layer;
  }

  int in_channels_ = 64;
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  nn::Sequential layer1_, layer2_, layer3_, layer4_;
  nn::Linear fc_;
};

// A C++ module as a Model.
template <typename ModuleHolder>
class NativeModel final : public Model {
 public:
  explicit NativeModel(ModuleHolder module) : module_(std::move(module)) {}
  torch::Tensor Forward(const torch::Tensor& input) override { return module_->forward(input); }
  std::vector<torch::Tensor> Parameters() override { return module_->parameters(); }
  std::vector<torch::Tensor> Buffers() override { return module_->buffers(); }
  void SetTraining(bool training) override { module_->train(training); }
  void To(const torch::Device& device) override { module_->to(device); }

 private:
  ModuleHolder module_;
};

class TorchScriptModel final : public Model {
 public:
  explicit TorchScriptModel(torch::jit::Module module) : module_(std::move(module)) {}
  torch::Tensor Forward(const torch::Tensor& input) override {
    return module_.forward({input}).toTensor();
  }
  std::vector<torch::Tensor> Parameters() override {
    std::vector<torch::Tensor> parameters;
    for (const torch::Tensor& parameter : module_.parameters()) {
      if (parameter.requires_grad()) {
        parameters.push_back(parameter);
      }
    }
    return parameters;
  }
  std::vector<torch::Tensor> Buffers() override {
    std::vector<torch::Tensor> buffers;
    for (const torch::Tensor& buffer : module_.buffers()) {
      buffers.push_back(buffer);
    }
    return buffers;
  }
  void SetTraining(bool training) override { module_.train(training); }
  void To(const torch::Device& device) override { module_.to(device); }

 private:
  torch::jit::Module module_;
};

}  // namespace

void ToChannelsLast(Model& model) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> tensors = model.Parameters();
  for (torch::Tensor& buffer : model.Buffers()) {
    tensors.push_back(buffer);
  }
  for (torch::Tensor& tensor : tensors) {
    if (tensor.dim() == 4) {
      tensor.set_data(tensor.contiguous(torch::MemoryFormat::ChannelsLast));
    }
  }
}

absl::StatusOr<std::unique_ptr<Model>> CreateModel(const std::string& name, int num_classes) {
  if (num_classes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("model needs >= 1 class, got ", num_classes));
  }
  if (name == "small_cnn") {
    return std::make_unique<NativeModel<SmallCnn>>(SmallCnn(num_classes));
  }
  if (name == "resnet18") {
    using ResNet18 = nn::ModuleHolder<ResNetImpl<BasicBlock>>;
    return std::make_unique<NativeModel<ResNet18>>(
        ResNet18(std::array<int, 4>{2, 2, 2, 2}, num_classes));
  }
  if (name == "resnet50") {
    using ResNet50 = nn::ModuleHolder<ResNetImpl<Bottleneck>>;
    return std::make_unique<NativeModel<ResNet50>>(
        ResNet50(std::array<int, 4>{3, 4, 6, 3}, num_classes));
  }
  std::error_code error;
  if (std::filesystem::is_regular_file(name, error)) {
    try {
      return std::make_unique<TorchScriptModel>(torch::jit::load(name));
    } catch (const c10::Error& e) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", name, "' is not a loadable TorchScript file: ", e.what_without_backtrace()));
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", name, "' is not a loadable TorchScript file: ", e.what()));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model '", name,
                   "': built in are small_cnn, resnet18 and resnet50; otherwise give the path of a "
                   "TorchScript file"));
}

}  // namespace heterodl
