#include "src/train/device_feed.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/common/status_macros.h"

namespace heterodl {
namespace {

// ImageNet statistics in pixel units: the wire carries uint8.
constexpr float kMean[3] = {0.485f * 255, 0.456f * 255, 0.406f * 255};
constexpr float kStd[3] = {0.229f * 255, 0.224f * 255, 0.225f * 255};

}  // namespace

absl::StatusOr<torch::Device> ChooseDevice(DeviceKind requested, int local_rank) {
  const bool cuda = torch::cuda::is_available();
  if (requested == DeviceKind::kCpu || (requested == DeviceKind::kAuto && !cuda)) {
    return torch::Device(torch::kCPU);
  }
  if (!cuda) {
    return absl::FailedPreconditionError("--device cuda: no CUDA device is usable here");
  }
  // A count (c10's DeviceIndex is a signed char), never negative.
  // NOLINTNEXTLINE(bugprone-signed-char-misuse)
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  if (local_rank >= count) {
    return absl::FailedPreconditionError(absl::StrCat("local rank ", local_rank, " needs GPU ",
                                                      local_rank, " but this host has ", count,
                                                      "; run at most one rank per GPU (--ranks)"));
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
}

BatchFeeder::BatchFeeder(RemoteLoader& loader, const torch::Device& device, bool convert,
                         torch::MemoryFormat format)
    : loader_(loader),
      device_(device),
      convert_(convert),
      format_(format),
      scale_(torch::tensor({1 / kStd[0], 1 / kStd[1], 1 / kStd[2]}).view({1, 3, 1, 1}).to(device)),
      shift_(torch::tensor({-kMean[0] / kStd[0], -kMean[1] / kStd[1], -kMean[2] / kStd[2]})
                 .view({1, 3, 1, 1})
                 .to(device)) {}

absl::Status BatchFeeder::StartEpoch(uint32_t epoch, int64_t start_batch) {
  RETURN_IF_ERROR(loader_.SetEpoch(epoch, start_batch));
  position_ = {epoch, start_batch};
  return absl::OkStatus();
}

absl::StatusOr<std::optional<DeviceBatch>> BatchFeeder::Next() {
  const absl::Time wait_start = absl::Now();
  ASSIGN_OR_RETURN(std::optional<Batch> batch, loader_.Next());
  last_wait_ms_ = absl::ToDoubleMilliseconds(absl::Now() - wait_start);
  if (!batch) {
    return std::optional<DeviceBatch>();
  }
  DeviceBatch out;
  out.host = *std::move(batch);
  const Batch& host = out.host;
  // Borrowed views of the received buffers; `out.host` keeps them alive
  // until the step that uses them has finished.
  torch::Tensor pixels =
      torch::from_blob(const_cast<uint8_t*>(host.images().data()),
                       {host.size(), host.height(), host.width(), host.channels()}, torch::kUInt8);
  torch::Tensor labels = torch::from_blob(out.host.labels.data(), {host.size()}, torch::kInt64);
  position_ = {host.epoch, host.index + 1};
  if (!convert_) {
    return std::optional<DeviceBatch>(std::move(out));
  }
  const bool non_blocking = device_.is_cuda();
  pixels = pixels.to(device_, /*non_blocking=*/non_blocking);
  out.labels = labels.to(device_, /*non_blocking=*/non_blocking);
  // One kernel: the uint8 pixels are read through the NCHW view of their
  // NHWC buffer (channels-last strides), converted and normalized as they
  // are read. A contiguous model gets them re-laid out in one more.
  out.input = torch::addcmul(shift_, pixels.permute({0, 3, 1, 2}), scale_).contiguous(format_);
  return std::optional<DeviceBatch>(std::move(out));
}

}  // namespace heterodl
