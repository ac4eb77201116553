// Communicator: the collectives the trainer needs, over a c10d backend: NCCL
// when the ranks train on CUDA devices, Gloo on CPU. Internal to src/train
// (includes ATen).
//
//   ASSIGN_OR_RETURN(auto communicator, CreateCommunicator(rendezvous));
//   auto pending = communicator->StartAllReduceSum(bucket);  // returns at once
//   ... more work ...
//   RETURN_IF_ERROR(pending->Wait());
#ifndef HETERODL_SRC_TRAIN_COMMUNICATOR_H_
#define HETERODL_SRC_TRAIN_COMMUNICATOR_H_

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/train/rendezvous_options.h"

namespace heterodl {

// A collective in flight.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  // Blocks until the result is in the tensor (on CUDA: until the current
  // stream is ordered after it). UNAVAILABLE names the failure (a peer gone).
  virtual absl::Status Wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  // Starts replacing `tensor` by its sum over all ranks. All ranks start the
  // same collectives in the same order. `tensor` must stay alive until Wait().
  virtual std::unique_ptr<PendingCollective> StartAllReduceSum(at::Tensor tensor) = 0;
  // Replaces `tensor` by its sum over all ranks.
  absl::Status AllReduceSum(at::Tensor tensor) {
    return StartAllReduceSum(std::move(tensor))->Wait();
  }
  // Replaces `tensor` by rank 0's.
  virtual absl::Status Broadcast(at::Tensor tensor) = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // "gloo" or "nccl".
  virtual std::string backend() const = 0;
  // Ends the group in order after the last collective, on every rank (NCCL:
  // its communicators destroyed, so it has nothing to warn about at exit).
  // A communicator destroyed without it aborts the group instead: the way
  // out of a rank that failed, whatever the others are doing.
  virtual absl::Status Shutdown() = 0;
};

// Rendezvous through a c10d TCPStore hosted by rank 0, then the backend.
// Fails with a message naming the store's address when the rendezvous does
// not complete within the timeout.
absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(const RendezvousOptions& options);

}  // namespace heterodl

#endif  // HETERODL_SRC_TRAIN_COMMUNICATOR_H_
