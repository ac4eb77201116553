// SamplePool: worker threads that build batches sample by sample, shared
// fairly among the server's streams.
//
// A batch is a job of n items (its samples). Every idle thread takes the next
// item, so one batch is built by the whole pool: its latency is about
// n / (threads x per-core rate), not n / per-core rate, and a slow image holds
// one thread for one sample, not one thread for a whole batch. Each client (a
// loader, whatever its number of streams) has a queue of jobs, served first
// in, first out; the pool turns from queue to queue item by item, so a loader
// that asks for many batches cannot starve one that asks for few, and one
// loader's batches come out one after another, not side by side.
//
// Turns are weighed by what items cost (Job::item_cost, a pipeline's
// estimated work per sample): the next item goes to the queue that has been
// given the least work so far (start-time fair queuing), so a client whose
// samples cost a hundred times more gets a hundredth of the items, not half
// of the cores. A queue that was idle starts level with the others, not
// ahead by what it did not ask for.
//
//   SamplePool pool(threads);
//   const SamplePool::QueueId queue = pool.OpenQueue();   // one per client
//   auto cancelled = std::make_shared<std::atomic<bool>>(false);  // per stream
//   pool.Submit(queue, {n, [&](int i) { BuildSample(i); },
//                       [&](bool built) { Send(built); }, cancelled});
//   *cancelled = true;       // drops that stream's jobs that have not started
//   pool.CloseQueue(queue);  // drops everything of the queue not started
#ifndef HETERODL_SRC_SERVER_SAMPLE_POOL_H_
#define HETERODL_SRC_SERVER_SAMPLE_POOL_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace heterodl {

class SamplePool {
 public:
  using QueueId = uint64_t;

  struct Job {
    // Items to run, >= 1.
    int items = 1;
    // Runs item i (0 <= i < items) on a worker; items of one job run
    // concurrently on different workers.
    std::function<void(int item)> run;
    // Runs once on a worker, after the last item of the job has returned:
    // `completed` is true when every item ran, false when the job's queue was
    // closed, `cancelled` set or the pool destroyed before all of them
    // started.
    std::function<void(bool completed)> done;
    // Optional: once true, the items not yet started are dropped.
    std::shared_ptr<const std::atomic<bool>> cancelled;
    // What one item costs, in any unit shared by every job (> 0).
    double item_cost = 1;
  };

  // `nice` > 0 lowers the workers' scheduling priority by that much (Linux
  // nice, per thread), so that on a host they share, the threads that move
  // batches (the trainer's, the loader's, the server's sender) run first.
  explicit SamplePool(int threads, int nice = 0);
  // Jobs not yet started are dropped (done(false)); running items finish.
  ~SamplePool() ABSL_LOCKS_EXCLUDED(mu_);
  SamplePool(const SamplePool&) = delete;
  SamplePool& operator=(const SamplePool&) = delete;

  QueueId OpenQueue() ABSL_LOCKS_EXCLUDED(mu_);
  // Drops the queue's jobs whose items have not all started: each gets
  // done(false) from a worker once its running items return. Later Submits
  // to the queue are dropped the same way. Idempotent; never blocks.
  void CloseQueue(QueueId queue) ABSL_LOCKS_EXCLUDED(mu_);
  // Appends a job to `queue`.
  void Submit(QueueId queue, Job job) ABSL_LOCKS_EXCLUDED(mu_);

  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  struct JobState {
    Job job;
    int next_item = 0;  // the next item to hand out
    int running = 0;    // items handed out and not yet returned
    bool dropped = false;
    bool finished = false;  // `done` is due or ran
  };
  struct Queue {
    std::deque<std::shared_ptr<JobState>> jobs;
    bool closed = false;
    bool in_rotation = false;  // in turn_order_
    // The cost of the items it was given (from where it joined the
    // rotation last: see ScheduleLocked).
    double served = 0;
  };
  // What a worker does next.
  struct Work {
    std::shared_ptr<JobState> job;
    int item = -1;  // -1: only run job->job.done(false)
  };

  void WorkLoop(int nice) ABSL_LOCKS_EXCLUDED(mu_);
  // The next item of the queue given the least work so far, the first in
  // turn order among equals (or a job of a closed queue to drop).
  // REQUIRES: HasWorkLocked().
  Work TakeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasWorkLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !turn_order_.empty(); }
  // Puts a queue with jobs in the rotation, at its end; one that was out of
  // it starts at the work given so far to the one served last.
  void ScheduleLocked(QueueId id, Queue& queue) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True when `job` has nothing running and nothing left to hand out.
  static bool FinishedLocked(const JobState& job);

  absl::Mutex mu_;
  QueueId next_queue_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<QueueId, Queue> queues_ ABSL_GUARDED_BY(mu_);
  // Queues with jobs to hand out, in turn.
  std::deque<QueueId> turn_order_ ABSL_GUARDED_BY(mu_);
  // Queue::served of the queue given the last item, before it was.
  double virtual_time_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_SERVER_SAMPLE_POOL_H_
