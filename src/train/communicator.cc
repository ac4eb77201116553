#include "src/train/communicator.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace heterodl {
namespace {

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(c10::intrusive_ptr<c10d::Store> store,
                   c10::intrusive_ptr<c10d::ProcessGroupGloo> group, int rank, int world_size)
      : store_(std::move(store)), group_(std::move(group)), rank_(rank), world_size_(world_size) {}

  absl::Status AllReduceMean(std::vector<at::Tensor>& tensors) override {
    if (world_size_ == 1) return absl::OkStatus();
    try {
      // One flat buffer: a single collective instead of one per parameter.
      std::vector<at::Tensor> flat{at::cat(FlattenAll(tensors))};
      group_->allreduce(flat)->wait();
      flat[0].div_(world_size_);
      int64_t offset = 0;
      for (at::Tensor& tensor : tensors) {
        const int64_t n = tensor.numel();
        tensor.copy_(flat[0].narrow(0, offset, n).view_as(tensor));
        offset += n;
      }
    } catch (const std::exception& error) {
      return absl::UnavailableError(absl::StrCat("gloo all-reduce failed: ", error.what()));
    }
    return absl::OkStatus();
  }

  absl::Status AllReduceSum(at::Tensor& tensor) override {
    if (world_size_ == 1) return absl::OkStatus();
    try {
      std::vector<at::Tensor> tensors{tensor};
      group_->allreduce(tensors)->wait();
    } catch (const std::exception& error) {
      return absl::UnavailableError(absl::StrCat("gloo all-reduce failed: ", error.what()));
    }
    return absl::OkStatus();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }

 private:
  static std::vector<at::Tensor> FlattenAll(const std::vector<at::Tensor>& tensors) {
    std::vector<at::Tensor> flat;
    flat.reserve(tensors.size());
    for (const at::Tensor& tensor : tensors) flat.push_back(tensor.reshape({-1}));
    return flat;
  }

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
  int rank_;
  int world_size_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(
    const RendezvousOptions& options) {
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(options.master_port);
    store_options.isServer = options.rank == 0;
    store_options.numWorkers = options.world_size;
    store_options.waitWorkers = true;
    store_options.timeout = absl::ToChronoMilliseconds(options.timeout);
    auto store = c10::make_intrusive<c10d::TCPStore>(options.master_addr, store_options);

    auto gloo_options =
        c10d::ProcessGroupGloo::Options::create(absl::ToChronoMilliseconds(options.timeout));
    gloo_options->devices.push_back(
        options.local_hostname.empty()
            ? c10d::ProcessGroupGloo::createDefaultDevice()
            : c10d::ProcessGroupGloo::createDeviceForHostname(options.local_hostname));
    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, options.rank,
                                                             options.world_size, gloo_options);
    return std::unique_ptr<Communicator>(
        new GlooCommunicator(store, group, options.rank, options.world_size));
  } catch (const std::exception& error) {
    return absl::UnavailableError(
        absl::StrCat("rendezvous with ", options.world_size, " ranks through the TCPStore at ",
                     options.master_addr, ":", options.master_port, " failed: ", error.what()));
  }
}

}  // namespace heterodl
