#include "src/server/sample_pool.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

namespace heterodl {

SamplePool::SamplePool(int threads, int nice) {
  if (threads < 1) {
    threads = 1;
  }
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this, nice] { WorkLoop(nice); });
  }
}

SamplePool::~SamplePool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) {
    thread.join();
  }
}

SamplePool::QueueId SamplePool::OpenQueue() {
  absl::MutexLock lock(&mu_);
  const QueueId id = next_queue_++;
  queues_[id];
  return id;
}

void SamplePool::CloseQueue(QueueId id) {
  absl::MutexLock lock(&mu_);
  auto it = queues_.find(id);
  if (it == queues_.end()) {
    return;
  }
  it->second.closed = true;
  // A queue with jobs stays until a worker has dropped them all.
  if (it->second.jobs.empty()) {
    queues_.erase(it);
  }
}

void SamplePool::Submit(QueueId id, Job job) {
  auto state = std::make_shared<JobState>();
  state->job = std::move(job);
  if (state->job.items < 1) {
    state->job.items = 1;
  }
  absl::MutexLock lock(&mu_);
  // An unknown queue was closed and emptied: the job is dropped like its
  // jobs were, by a worker, so `done` never runs on the caller's thread.
  auto [it, inserted] = queues_.try_emplace(id);
  if (inserted) {
    it->second.closed = true;
  }
  it->second.jobs.push_back(std::move(state));
  ScheduleLocked(id, it->second);
}

void SamplePool::ScheduleLocked(QueueId id, Queue& queue) {
  if (queue.in_rotation || queue.jobs.empty()) {
    return;
  }
  queue.in_rotation = true;
  queue.served = std::max(queue.served, virtual_time_);
  turn_order_.push_back(id);
}

bool SamplePool::FinishedLocked(const JobState& job) {
  return job.running == 0 && (job.dropped || job.next_item == job.job.items);
}

SamplePool::Work SamplePool::TakeLocked() {
  // Turn order breaks ties: with equal costs, queues take turns item by item.
  auto next = turn_order_.begin();
  for (auto it = turn_order_.begin(); it != turn_order_.end(); ++it) {
    if (queues_[*it].served < queues_[*next].served) {
      next = it;
    }
  }
  const QueueId id = *next;
  turn_order_.erase(next);
  Queue& queue = queues_[id];
  queue.in_rotation = false;
  Work work{queue.jobs.front(), -1};
  const Job& job = work.job->job;
  if (queue.closed || stopping_ || (job.cancelled != nullptr && job.cancelled->load())) {
    work.job->dropped = true;
    queue.jobs.pop_front();
  } else {
    virtual_time_ = queue.served;
    queue.served += job.item_cost > 0 ? job.item_cost : 1;
    work.item = work.job->next_item++;
    ++work.job->running;
    if (work.job->next_item == work.job->job.items) {
      queue.jobs.pop_front();
    }
  }
  if (!queue.jobs.empty()) {
    ScheduleLocked(id, queue);
  } else if (queue.closed) {
    queues_.erase(id);
  }
  return work;
}

void SamplePool::WorkLoop(int nice) {
  // Linux applies a thread's nice to that thread alone. Failure (a
  // sandbox refusing it) only costs the priority.
  if (nice > 0) {
    (void)setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), nice);
  }
  while (true) {
    Work work;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](SamplePool* pool) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool->mu_) {
            return pool->stopping_ || pool->HasWorkLocked();
          },
          this));
      if (!HasWorkLocked()) {
        return;  // stopping, and every job dropped
      }
      work = TakeLocked();
    }
    if (work.item >= 0) {
      work.job->job.run(work.item);
    }
    bool finished;
    bool completed;
    {
      absl::MutexLock lock(&mu_);
      if (work.item >= 0) {
        --work.job->running;
      }
      // Exactly one worker sees the job finish: the one whose item (or
      // drop) brought `running` to zero with nothing left to hand out.
      finished = FinishedLocked(*work.job) && !std::exchange(work.job->finished, true);
      completed = !work.job->dropped;
    }
    if (finished) {
      work.job->job.done(completed);
    }
  }
}

}  // namespace heterodl
