// Communicator: the collectives the trainer needs, over a c10d process group.
// Internal to src/train (includes ATen).
#ifndef HETERODL_SRC_TRAIN_COMMUNICATOR_H_
#define HETERODL_SRC_TRAIN_COMMUNICATOR_H_

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace heterodl {

class Communicator {
 public:
  virtual ~Communicator() = default;
  // Replaces each tensor by its mean over all ranks. All ranks call this
  // with tensors of the same shapes, in the same order.
  virtual absl::Status AllReduceMean(std::vector<at::Tensor>& tensors) = 0;
  // Replaces `tensor` by its sum over all ranks.
  virtual absl::Status AllReduceSum(at::Tensor& tensor) = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
};

struct RendezvousOptions {
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string local_hostname;  // empty: this host's name
  absl::Duration timeout = absl::Seconds(60);
};

// Gloo over a c10d TCPStore hosted by rank 0. Fails with a message naming the
// store's address when the rendezvous does not complete within the timeout.
absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(
    const RendezvousOptions& options);

}  // namespace heterodl

#endif  // HETERODL_SRC_TRAIN_COMMUNICATOR_H_
