// A minimal C++ trainer on heterodl's RemoteLoader: a softmax classifier on
// 4x4-pooled pixels, trained by SGD for a few epochs. It shows the library's
// whole surface: connect, per-epoch iteration in order, the batch layout and
// the resumable position. A real trainer hands batch.images() to its
// framework (LibTorch: torch::from_blob over batch.images().data(), no copy);
// a segmentation or detection batch's other fields are batch.View<T>(name).
//
//   heterodl-cpp-example HOST:PORT[,HOST:PORT...] [EPOCHS]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "src/client/remote_loader.h"

namespace {

constexpr int kGrid = 4;  // features: mean R, G, B over a 4x4 grid of cells

std::vector<float> Features(const heterodl::Batch& batch, int64_t slot) {
  std::vector<float> features(kGrid * kGrid * 3 + 1, 0.0f);
  const uint8_t* image =
      batch.images().data() + slot * int64_t{batch.height()} * batch.width() * batch.channels();
  for (int y = 0; y < batch.height(); ++y) {
    for (int x = 0; x < batch.width(); ++x) {
      const int cell = (y * kGrid / batch.height()) * kGrid + x * kGrid / batch.width();
      for (int c = 0; c < 3; ++c) {
        features[cell * 3 + c] += image[(y * batch.width() + x) * batch.channels() + c] / 255.0f;
      }
    }
  }
  const float per_cell = float(batch.height()) * batch.width() / (kGrid * kGrid);
  for (int i = 0; i < kGrid * kGrid * 3; ++i) features[i] /= per_cell;
  features.back() = 1.0f;  // bias
  return features;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s HOST:PORT[,HOST:PORT...] [EPOCHS]\n", argv[0]);
    return 2;
  }
  heterodl::RemoteLoaderOptions options;
  for (std::string list = argv[1]; !list.empty();) {
    const size_t comma = list.find(',');
    options.servers.fixed.push_back(list.substr(0, comma));
    list = comma == std::string::npos ? "" : list.substr(comma + 1);
  }
  options.batch_size = 16;
  options.pipeline = "random_resized_crop(32)|hflip(0.5)";
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 3;

  absl::StatusOr<std::unique_ptr<heterodl::RemoteLoader>> loader =
      heterodl::RemoteLoader::Connect(options);
  if (!loader.ok()) {
    std::fprintf(stderr, "%s\n", loader.status().ToString().c_str());
    return 1;
  }
  const int classes = static_cast<int>((*loader)->dataset().class_names.size());
  const int dims = kGrid * kGrid * 3 + 1;
  std::vector<float> weights(classes * dims, 0.0f);

  for (int epoch = 0; epoch < epochs; ++epoch) {
    if (absl::Status status = (*loader)->SetEpoch(epoch); !status.ok()) {
      std::fprintf(stderr, "%s\n", status.ToString().c_str());
      return 1;
    }
    double loss_sum = 0;
    int64_t samples = 0;
    while (true) {
      absl::StatusOr<std::optional<heterodl::Batch>> batch = (*loader)->Next();
      if (!batch.ok()) {
        std::fprintf(stderr, "%s\n", batch.status().ToString().c_str());
        return 1;
      }
      if (!batch->has_value()) break;  // end of the epoch
      const heterodl::Batch& b = **batch;
      std::vector<float> gradient(weights.size(), 0.0f);
      for (int64_t slot = 0; slot < b.size(); ++slot) {
        const std::vector<float> x = Features(b, slot);
        std::vector<double> logits(classes);
        double max_logit = -1e30;
        for (int k = 0; k < classes; ++k) {
          for (int d = 0; d < dims; ++d) logits[k] += weights[k * dims + d] * x[d];
          max_logit = std::max(max_logit, logits[k]);
        }
        double total = 0;
        for (double& logit : logits) total += (logit = std::exp(logit - max_logit));
        const int64_t label = b.labels[slot];
        loss_sum -= std::log(logits[label] / total);
        for (int k = 0; k < classes; ++k) {
          const double error = logits[k] / total - (k == label ? 1.0 : 0.0);
          for (int d = 0; d < dims; ++d) gradient[k * dims + d] += error * x[d];
        }
      }
      for (size_t i = 0; i < weights.size(); ++i) weights[i] -= 0.5f * gradient[i] / b.size();
      samples += b.size();
    }
    const heterodl::LoaderPosition position = (*loader)->position();
    std::printf("epoch %d: %lld samples, mean loss %.4f (position: epoch %u, batch %lld)\n", epoch,
                static_cast<long long>(samples), loss_sum / samples, position.epoch,
                static_cast<long long>(position.next_batch));
  }
  return 0;
}
