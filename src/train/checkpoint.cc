#include "src/train/checkpoint.h"

#include <torch/serialize.h>

#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace heterodl {
namespace {

constexpr char kFileName[] = "checkpoint.pt";

std::string Message(const std::exception& error) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&error)) {
    return c10_error->what_without_backtrace();
  }
  return error.what();
}

}  // namespace

absl::Status SaveCheckpoint(const std::string& dir, Model& model,
                            torch::optim::Optimizer& optimizer, const TrainingState& state) {
  const std::filesystem::path path = std::filesystem::path(dir) / kFileName;
  const std::filesystem::path partial = std::filesystem::path(dir) / "checkpoint.pt.partial";
  try {
    std::filesystem::create_directories(dir);
    torch::NoGradGuard no_grad;
    torch::serialize::OutputArchive archive;
    const std::vector<torch::Tensor> parameters = model.Parameters();
    for (size_t i = 0; i < parameters.size(); ++i) {
      archive.write(absl::StrCat("parameter.", i), parameters[i].detach().cpu());
    }
    const std::vector<torch::Tensor> buffers = model.Buffers();
    for (size_t i = 0; i < buffers.size(); ++i) {
      archive.write(absl::StrCat("buffer.", i), buffers[i].cpu());
    }
    torch::serialize::OutputArchive optimizer_archive;
    optimizer.save(optimizer_archive);
    archive.write("optimizer", optimizer_archive);
    archive.write("state", torch::tensor({state.step, static_cast<int64_t>(state.epoch),
                                          state.next_batch, static_cast<int64_t>(parameters.size()),
                                          static_cast<int64_t>(buffers.size())}));
    // 64-bit values travel as int64, bit for bit.
    archive.write(
        "plan",
        torch::tensor(
            {static_cast<int64_t>(state.world_size), static_cast<int64_t>(state.batch_size),
             static_cast<int64_t>(state.epoch_offset), state.first_batch,
             static_cast<int64_t>(state.dataset_fingerprint), static_cast<int64_t>(state.seed),
             static_cast<int64_t>(state.drop_last), static_cast<int64_t>(state.shuffle),
             static_cast<int64_t>(state.shuffle_block_shards.value_or(0))}));
    archive.save_to(partial.string());
    std::filesystem::rename(partial, path);
  } catch (const std::exception& error) {
    return absl::UnavailableError(
        absl::StrCat("cannot write checkpoint '", path.string(), "': ", Message(error)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<TrainingState>> LoadCheckpoint(const std::string& dir, Model& model,
                                                            torch::optim::Optimizer& optimizer) {
  const std::filesystem::path path = std::filesystem::path(dir) / kFileName;
  std::error_code exists_error;
  if (!std::filesystem::exists(path, exists_error)) {
    return std::optional<TrainingState>();
  }
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path.string());
    torch::Tensor state;
    archive.read("state", state);
    const std::vector<torch::Tensor> parameters = model.Parameters();
    const std::vector<torch::Tensor> buffers = model.Buffers();
    if (state.numel() != 5 || state[3].item<int64_t>() != static_cast<int64_t>(parameters.size()) ||
        state[4].item<int64_t>() != static_cast<int64_t>(buffers.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint '", path.string(), "' was written for another model (",
                       state.numel() == 5 ? state[3].item<int64_t>() : -1,
                       " parameter tensors, this one has ", parameters.size(), ")"));
    }
    torch::NoGradGuard no_grad;
    auto restore = [&](const std::string& key, const torch::Tensor& target) -> absl::Status {
      torch::Tensor saved;
      archive.read(key, saved);
      if (!saved.sizes().equals(target.sizes())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "checkpoint '", path.string(), "': ", key, " has shape ", c10::str(saved.sizes()),
            " but the model's is ", c10::str(target.sizes()), " (another model or class count?)"));
      }
      target.copy_(saved);
      return absl::OkStatus();
    };
    for (size_t i = 0; i < parameters.size(); ++i) {
      absl::Status restored = restore(absl::StrCat("parameter.", i), parameters[i]);
      if (!restored.ok()) {
        return restored;
      }
    }
    for (size_t i = 0; i < buffers.size(); ++i) {
      absl::Status restored = restore(absl::StrCat("buffer.", i), buffers[i]);
      if (!restored.ok()) {
        return restored;
      }
    }
    torch::serialize::InputArchive optimizer_archive;
    archive.read("optimizer", optimizer_archive);
    optimizer.load(optimizer_archive);
    TrainingState loaded;
    loaded.step = state[0].item<int64_t>();
    loaded.epoch = static_cast<uint32_t>(state[1].item<int64_t>());
    loaded.next_batch = state[2].item<int64_t>();
    torch::Tensor plan;
    // 8 values before --shuffle-block-shards was saved, 9 since.
    if (archive.try_read("plan", plan) && (plan.numel() == 8 || plan.numel() == 9)) {
      loaded.world_size = static_cast<uint32_t>(plan[0].item<int64_t>());
      loaded.batch_size = static_cast<uint32_t>(plan[1].item<int64_t>());
      loaded.epoch_offset = static_cast<uint64_t>(plan[2].item<int64_t>());
      loaded.first_batch = plan[3].item<int64_t>();
      loaded.dataset_fingerprint = static_cast<uint64_t>(plan[4].item<int64_t>());
      loaded.seed = static_cast<uint64_t>(plan[5].item<int64_t>());
      loaded.drop_last = plan[6].item<int64_t>() != 0;
      loaded.shuffle = plan[7].item<int64_t>() != 0;
      if (plan.numel() == 9) {
        loaded.shuffle_block_shards = static_cast<uint32_t>(plan[8].item<int64_t>());
      }
    }
    return std::optional<TrainingState>(loaded);
  } catch (const std::exception& error) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read checkpoint '", path.string(), "': ", Message(error)));
  }
}

}  // namespace heterodl
