// GradientReducer: data-parallel gradient averaging that overlaps backward.
//
// Parameters are grouped, in reverse order (roughly the order backward
// produces their gradients), into buckets of about `bucket_bytes`. A hook on
// each parameter copies its gradient into its bucket's flat buffer; once a
// bucket is full its all-reduce starts while backward goes on with the
// earlier layers. Buckets start in index order on every rank, as collectives
// must. As with DDP's default, a parameter used twice in one forward pass
// (shared weights) is not supported: its second gradient is ignored.
// Internal to src/train (includes ATen).
//
//   GradientReducer reducer(model->Parameters(), *communicator, 25 << 20);
//   optimizer.zero_grad();
//   loss.backward();                       // buckets start during this
//   RETURN_IF_ERROR(reducer.FinishStep());  // averages now in p.grad()
//   optimizer.step();
#ifndef HETERODL_SRC_TRAIN_GRADIENT_REDUCER_H_
#define HETERODL_SRC_TRAIN_GRADIENT_REDUCER_H_

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "src/train/communicator.h"

namespace heterodl {

class GradientReducer {
 public:
  // Registers the hooks. `communicator` must outlive the reducer; so must
  // the parameters' autograd graph (the model).
  GradientReducer(std::vector<at::Tensor> parameters, Communicator& communicator,
                  size_t bucket_bytes);
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // After backward: starts the buckets backward did not fill (a parameter
  // that got no gradient this step contributes zeros, on every rank alike),
  // waits for all of them and writes the mean over ranks into each
  // parameter's grad. Resets for the next step.
  absl::Status FinishStep() ABSL_LOCKS_EXCLUDED(mu_);

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // Buckets whose all-reduce started during the last backward, before
  // FinishStep: evidence of overlap.
  int buckets_started_in_backward() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Bucket {
    std::vector<size_t> parameters;  // indices into parameters_
    std::vector<int64_t> offsets;    // of each parameter in `flat`
    at::Tensor flat;
    size_t ready = 0;  // gradients copied in this step
    std::unique_ptr<PendingCollective> pending;
  };

  void OnGradient(size_t parameter, const at::Tensor& gradient) ABSL_LOCKS_EXCLUDED(mu_);
  // Starts every bucket from next_bucket_ on that is full, in order.
  void StartReadyBucketsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::vector<at::Tensor> parameters_;
  Communicator& communicator_;
  // Per parameter: its bucket and whether its gradient arrived this step.
  std::vector<size_t> bucket_of_;
  mutable absl::Mutex mu_;
  std::vector<Bucket> buckets_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> arrived_ ABSL_GUARDED_BY(mu_);
  size_t next_bucket_ ABSL_GUARDED_BY(mu_) = 0;
  int started_in_backward_ ABSL_GUARDED_BY(mu_) = 0;
  int last_started_in_backward_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_TRAIN_GRADIENT_REDUCER_H_
