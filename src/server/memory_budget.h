// MemoryBudget: the bytes of batches a data server holds for all of its
// streams together, from the moment a batch is asked for until its pixels are
// sent. Each stream is bounded on its own (StreamPolicy::max_stream_bytes),
// but a few streams that ask and never read could still take the machine's
// memory between them; the budget makes them wait instead.
//
//   auto budget = MemoryBudget::Create(8ull << 30);
//   RETURN_IF_ERROR(budget->Fits(batch_bytes));  // never fits: refuse
//   budget->Reserve(batch_bytes, stream_key, [](MemoryBudget::Grant grant) {
//     // Runs now, or later on the thread whose release made room.
//   });
//   // ~Grant gives the bytes back, and starts the waiters that now fit.
//
// Waiters are served first come, first served: a large batch is not passed
// over forever by small ones. Thread-safe.
#ifndef HETERODL_SRC_SERVER_MEMORY_BUDGET_H_
#define HETERODL_SRC_SERVER_MEMORY_BUDGET_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace heterodl {

class MemoryBudget : public std::enable_shared_from_this<MemoryBudget> {
 public:
  // Bytes reserved from a budget, given back when destroyed. Move-only; an
  // empty grant (default, or handed to a cancelled waiter) holds nothing.
  class Grant {
   public:
    Grant() = default;
    Grant(Grant&& other) noexcept { *this = std::move(other); }
    Grant& operator=(Grant&& other) noexcept;
    Grant(const Grant&) = delete;
    Grant& operator=(const Grant&) = delete;
    ~Grant() { Reset(); }

    uint64_t bytes() const { return bytes_; }
    // Gives the bytes back now; the grant becomes empty.
    void Reset();

   private:
    friend class MemoryBudget;
    Grant(std::shared_ptr<MemoryBudget> budget, uint64_t bytes)
        : budget_(std::move(budget)), bytes_(bytes) {}

    std::shared_ptr<MemoryBudget> budget_;
    uint64_t bytes_ = 0;
  };

  // Called with the grant: at once from Reserve() when the bytes fit, else
  // from the thread whose release made room, with no lock of the budget's
  // held; with an empty grant when its waiter was cancelled.
  using Ready = std::function<void(Grant)>;

  struct Stats {
    uint64_t capacity = 0;
    uint64_t reserved = 0;       // now
    uint64_t peak_reserved = 0;  // since start
    int waiting = 0;             // reservations waiting now
    uint64_t waited = 0;         // reservations that had to wait, since start
    // How long the oldest waiting one has waited (zero when none waits).
    absl::Duration longest_wait;
  };

  static std::shared_ptr<MemoryBudget> Create(
      uint64_t capacity, std::function<absl::Time()> clock = [] { return absl::Now(); });

  // RESOURCE_EXHAUSTED, saying both figures, when `bytes` alone are over the
  // capacity: such a reservation would wait forever.
  absl::Status Fits(uint64_t bytes) const;
  // Reserves `bytes` for `ready`. `key` names who waits (a stream), for
  // CancelWaiting. REQUIRES: Fits(bytes).
  void Reserve(uint64_t bytes, const void* key, Ready ready) ABSL_LOCKS_EXCLUDED(mu_);
  // Hands every reservation of `key` still waiting an empty grant, on this
  // thread: its `ready` must only schedule work, not take the caller's
  // locks.
  void CancelWaiting(const void* key) ABSL_LOCKS_EXCLUDED(mu_);
  // The owner of the waiters' work is going away: hands every waiter an
  // empty grant, waits for the waiters being started by releases on other
  // threads, and from then on hands every Reserve() an empty grant at once.
  // Grants may outlive it; their releases start nothing.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

  Stats GetStats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Waiter {
    uint64_t bytes;
    const void* key;
    Ready ready;
    absl::Time since;
  };

  MemoryBudget(uint64_t capacity, std::function<absl::Time()> clock)
      : capacity_(capacity), clock_(std::move(clock)) {}

  // Hands the waiters `cancel` picks an empty grant, then starts those
  // that now fit.
  void CancelWhere(const std::function<bool(const Waiter&)>& cancel) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the `ready` of waiters taken from the queue: `cancelled` with an
  // empty grant, `started` with theirs.
  void Run(const std::deque<Waiter>& cancelled, const std::deque<Waiter>& started)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Gives `bytes` back and starts the waiters that now fit.
  void Release(uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // The waiters at the head of the queue that fit now, their bytes
  // reserved.
  std::deque<Waiter> TakeFittingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t capacity_;
  const std::function<absl::Time()> clock_;
  mutable absl::Mutex mu_;
  uint64_t reserved_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t peak_reserved_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t waited_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  // Waiters taken from the queue whose `ready` has not returned yet.
  int starting_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// The default budget: half of what this process may use, the smaller of the
// machine's memory and its cgroup's limit (a container's), so the buffers
// of decoding, the kernel's and the trainer's on a shared host have room.
uint64_t DefaultMemoryBudgetBytes();

}  // namespace heterodl

#endif  // HETERODL_SRC_SERVER_MEMORY_BUDGET_H_
