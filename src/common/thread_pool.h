// ThreadPool: a fixed set of worker threads running queued closures in FIFO
// order.
//
//   ThreadPool pool(std::thread::hardware_concurrency());
//   pool.Schedule([&] { BuildBatch(id); });
//
// The destructor finishes every closure already scheduled, then joins.
#ifndef HETERODL_SRC_COMMON_THREAD_POOL_H_
#define HETERODL_SRC_COMMON_THREAD_POOL_H_

#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace heterodl {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Schedule(std::function<void()> closure) ABSL_LOCKS_EXCLUDED(mu_);
  int size() const { return static_cast<int>(threads_.size()); }

 private:
  void WorkLoop() ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_COMMON_THREAD_POOL_H_
