#include "src/common/thread_pool.h"

#include <utility>

namespace heterodl {

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads < 1) num_threads = 1;
  threads_.reserve(num_threads);
  for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { WorkLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

void ThreadPool::Schedule(std::function<void()> closure) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(closure));
}

void ThreadPool::WorkLoop() {
  while (true) {
    std::function<void()> closure;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ThreadPool* pool) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool->mu_) {
            return pool->stopping_ || !pool->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping, and nothing left to run
      closure = std::move(queue_.front());
      queue_.pop_front();
    }
    closure();
  }
}

}  // namespace heterodl
