#include "src/train/communicator.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace heterodl {
namespace {

class BackendCollective final : public PendingCollective {
 public:
  BackendCollective(c10::intrusive_ptr<c10d::Work> work, std::string backend)
      : work_(std::move(work)), backend_(std::move(backend)) {}
  // Already complete: nothing to do (one rank), or failed to start.
  explicit BackendCollective(absl::Status result) : result_(std::move(result)) {}

  absl::Status Wait() override {
    if (work_ == nullptr) {
      return result_;
    }
    try {
      work_->wait();
    } catch (const std::exception& error) {
      return absl::UnavailableError(absl::StrCat(backend_, " collective failed: ", error.what()));
    }
    return absl::OkStatus();
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::string backend_;
  absl::Status result_;
};

class BackendCommunicator final : public Communicator {
 public:
  BackendCommunicator(c10::intrusive_ptr<c10d::Store> store,
                      c10::intrusive_ptr<c10d::Backend> backend, std::string name, int rank,
                      int world_size)
      : store_(std::move(store)),
        backend_(std::move(backend)),
        name_(std::move(name)),
        rank_(rank),
        world_size_(world_size) {}
  ~BackendCommunicator() override {
    if (shut_down_) {
      return;
    }
    try {
      backend_->abort();
    } catch (const std::exception&) {
      // Nothing more to do on the way out.
    }
  }

  absl::Status Shutdown() override {
    if (shut_down_) {
      return absl::OkStatus();
    }
    shut_down_ = true;
    try {
      backend_->shutdown();
    } catch (const std::exception& error) {
      return absl::UnavailableError(absl::StrCat(name_, " shutdown failed: ", error.what()));
    }
    return absl::OkStatus();
  }

  std::unique_ptr<PendingCollective> StartAllReduceSum(at::Tensor tensor) override {
    if (world_size_ == 1) {
      return std::make_unique<BackendCollective>(absl::OkStatus());
    }
    try {
      std::vector<at::Tensor> tensors{std::move(tensor)};
      return std::make_unique<BackendCollective>(backend_->allreduce(tensors), name_);
    } catch (const std::exception& error) {
      return std::make_unique<BackendCollective>(
          absl::UnavailableError(absl::StrCat(name_, " all-reduce failed: ", error.what())));
    }
  }

  absl::Status Broadcast(at::Tensor tensor) override {
    if (world_size_ == 1) {
      return absl::OkStatus();
    }
    try {
      std::vector<at::Tensor> tensors{std::move(tensor)};
      backend_->broadcast(tensors)->wait();
    } catch (const std::exception& error) {
      return absl::UnavailableError(absl::StrCat(name_, " broadcast failed: ", error.what()));
    }
    return absl::OkStatus();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string backend() const override { return name_; }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  std::string name_;
  int rank_;
  int world_size_;
  bool shut_down_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(const RendezvousOptions& options) {
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(options.master_port);
    store_options.isServer = options.rank == 0;
    store_options.numWorkers = options.world_size;
    store_options.waitWorkers = true;
    store_options.timeout = absl::ToChronoMilliseconds(options.timeout);
    auto store = c10::make_intrusive<c10d::TCPStore>(options.master_addr, store_options);

    c10::intrusive_ptr<c10d::Backend> backend;
    if (options.use_nccl) {
      auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
      nccl_options->timeout = absl::ToChronoMilliseconds(options.timeout);
      backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, options.rank, options.world_size,
                                                            nccl_options);
    } else {
      auto gloo_options =
          c10d::ProcessGroupGloo::Options::create(absl::ToChronoMilliseconds(options.timeout));
      gloo_options->devices.push_back(
          options.local_hostname.empty()
              ? c10d::ProcessGroupGloo::createDefaultDevice()
              : c10d::ProcessGroupGloo::createDeviceForHostname(options.local_hostname));
      backend = c10::make_intrusive<c10d::ProcessGroupGloo>(store, options.rank, options.world_size,
                                                            gloo_options);
    }
    return std::unique_ptr<Communicator>(new BackendCommunicator(store, std::move(backend),
                                                                 options.use_nccl ? "nccl" : "gloo",
                                                                 options.rank, options.world_size));
  } catch (const std::exception& error) {
    return absl::UnavailableError(
        absl::StrCat("rendezvous with ", options.world_size, " ranks through the TCPStore at ",
                     options.master_addr, ":", options.master_port, " failed: ", error.what()));
  }
}

}  // namespace heterodl
