#include "src/train/gradient_reducer.h"

#include <ATen/ATen.h>

#include "src/common/status_macros.h"

namespace heterodl {

GradientReducer::GradientReducer(std::vector<at::Tensor> parameters, Communicator& communicator,
                                 size_t bucket_bytes)
    : parameters_(std::move(parameters)),
      communicator_(communicator),
      bucket_of_(parameters_.size()) {
  absl::MutexLock lock(&mu_);
  arrived_.assign(parameters_.size(), false);
  // Reverse order: the last layers' gradients come first in backward.
  size_t bytes = 0;
  for (size_t i = parameters_.size(); i-- > 0;) {
    const at::Tensor& parameter = parameters_[i];
    const size_t size = static_cast<size_t>(parameter.numel()) * parameter.element_size();
    const bool same_kind =
        !buckets_.empty() &&
        parameters_[buckets_.back().parameters.front()].options().type_equal(parameter.options());
    if (buckets_.empty() || !same_kind || bytes + size > bucket_bytes) {
      buckets_.emplace_back();
      bytes = 0;
    }
    Bucket& bucket = buckets_.back();
    bucket.offsets.push_back(bucket.parameters.empty()
                                 ? 0
                                 : bucket.offsets.back() +
                                       parameters_[bucket.parameters.back()].numel());
    bucket.parameters.push_back(i);
    bucket_of_[i] = buckets_.size() - 1;
    bytes += size;
  }
  for (Bucket& bucket : buckets_) {
    const at::Tensor& last = parameters_[bucket.parameters.back()];
    bucket.flat = at::zeros({bucket.offsets.back() + last.numel()}, last.options());
  }
  for (size_t i = 0; i < parameters_.size(); ++i) {
    // The hook sees the gradient about to be accumulated into .grad; grads
    // are reset every step, so it is the step's whole gradient.
    at::Tensor(parameters_[i]).register_hook([this, i](const at::Tensor& gradient) {
      OnGradient(i, gradient);
    });
  }
}

void GradientReducer::OnGradient(size_t parameter, const at::Tensor& gradient) {
  absl::MutexLock lock(&mu_);
  if (arrived_[parameter]) {
    return;  // used twice in one graph: counted once
  }
  arrived_[parameter] = true;
  Bucket& bucket = buckets_[bucket_of_[parameter]];
  size_t slot = 0;
  while (bucket.parameters[slot] != parameter) {
    ++slot;
  }
  bucket.flat.narrow(0, bucket.offsets[slot], gradient.numel()).copy_(gradient.reshape({-1}));
  ++bucket.ready;
  const size_t before = next_bucket_;
  StartReadyBucketsLocked();
  started_in_backward_ += static_cast<int>(next_bucket_ - before);
}

void GradientReducer::StartReadyBucketsLocked() {
  while (next_bucket_ < buckets_.size() &&
         buckets_[next_bucket_].ready == buckets_[next_bucket_].parameters.size()) {
    Bucket& bucket = buckets_[next_bucket_++];
    bucket.pending = communicator_.StartAllReduceSum(bucket.flat);
  }
}

absl::Status GradientReducer::FinishStep() {
  absl::MutexLock lock(&mu_);
  // Parameters backward did not reach (unused this step) contribute zeros.
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (arrived_[i]) {
      continue;
    }
    Bucket& bucket = buckets_[bucket_of_[i]];
    size_t slot = 0;
    while (bucket.parameters[slot] != i) {
      ++slot;
    }
    bucket.flat.narrow(0, bucket.offsets[slot], parameters_[i].numel()).zero_();
    ++bucket.ready;
  }
  StartReadyBucketsLocked();
  absl::Status status;
  const double scale = 1.0 / communicator_.world_size();
  for (Bucket& bucket : buckets_) {
    if (bucket.pending != nullptr) {
      absl::Status waited = bucket.pending->Wait();
      if (status.ok()) {
        status = waited;
      }
      bucket.pending.reset();
    }
    if (status.ok()) {
      bucket.flat.mul_(scale);
      for (size_t slot = 0; slot < bucket.parameters.size(); ++slot) {
        at::Tensor parameter = parameters_[bucket.parameters[slot]];
        at::Tensor mean =
            bucket.flat.narrow(0, bucket.offsets[slot], parameter.numel()).view(parameter.sizes());
        if (parameter.grad().defined()) {
          parameter.mutable_grad().copy_(mean);
        } else {
          parameter.mutable_grad() = mean.clone();
        }
      }
    }
    bucket.ready = 0;
  }
  arrived_.assign(parameters_.size(), false);
  next_bucket_ = 0;
  last_started_in_backward_ = started_in_backward_;
  started_in_backward_ = 0;
  return status;
}

int GradientReducer::buckets_started_in_backward() const {
  absl::MutexLock lock(&mu_);
  return last_started_in_backward_;
}

}  // namespace heterodl
