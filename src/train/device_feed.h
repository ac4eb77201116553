// Getting batches onto the rank's device. Internal to src/train (LibTorch).
//
// The loader's pixel buffers are page-locked when the rank trains on CUDA
// (pinned_memory.h), so a batch crosses PCIe with one non-blocking copy
// queued behind the running step; uint8 -> float and Normalize run on the
// device. The training loop asks for batch k+1 right after queuing step k,
// so fetching and copying it overlap the device's work. On CPU the same code
// runs synchronously.
//
//   BatchFeeder feeder(*loader, device);
//   feeder.StartEpoch(epoch, start_batch);
//   ASSIGN_OR_RETURN(std::optional<DeviceBatch> batch, feeder.Next());
#ifndef HETERODL_SRC_TRAIN_DEVICE_FEED_H_
#define HETERODL_SRC_TRAIN_DEVICE_FEED_H_

#include <torch/types.h>

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "src/client/remote_loader.h"
#include "src/common/memory/buffer_pool.h"
#include "src/train/train_choices.h"

namespace heterodl {

// kAuto: CUDA device `local_rank` when CUDA is available, else the CPU;
// kCpu; kCuda (FAILED_PRECONDITION without a usable GPU).
absl::StatusOr<torch::Device> ChooseDevice(DeviceKind requested, int local_rank);

// One batch ready for the model.
struct DeviceBatch {
  torch::Tensor input;   // float [B, 3, H, W], normalized, on the device (unless not converting)
  torch::Tensor labels;  // int64 [B], on the device
  Batch host;            // the received batch; holds the pixels until the copy is done
};

class BatchFeeder {
 public:
  // `loader` must outlive the feeder. Without `convert` the batches are not
  // turned into model input (a modelled accelerator, which would do that
  // on the device: the host CPU must not pay for it). The input is laid out
  // in `format` (channels-last for a model converted by ToChannelsLast).
  BatchFeeder(RemoteLoader& loader, const torch::Device& device, bool convert = true,
              torch::MemoryFormat format = torch::MemoryFormat::Contiguous);

  absl::Status StartEpoch(uint32_t epoch, int64_t start_batch);
  // The next batch of the epoch, its copy queued on the device; nullopt at
  // the end of the epoch.
  absl::StatusOr<std::optional<DeviceBatch>> Next();
  // How long the last Next() waited for the loader (the data stall part;
  // moving and converting the batch is the step's own work).
  double last_wait_ms() const { return last_wait_ms_; }
  // Where to resume after the batches Next() has returned.
  LoaderPosition position() const { return position_; }

 private:
  RemoteLoader& loader_;
  const torch::Device device_;
  const bool convert_;
  const torch::MemoryFormat format_;
  // Normalization as one multiply-add, [1,3,1,1] on the device:
  // (x - mean) / std = x * scale + shift.
  torch::Tensor scale_;
  torch::Tensor shift_;
  LoaderPosition position_;
  double last_wait_ms_ = 0;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_TRAIN_DEVICE_FEED_H_
