#include "src/server/sample_pool.h"

#include <algorithm>
#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace heterodl {
namespace {

// What the jobs of one test did, in order.
class Journal {
 public:
  void Add(std::string entry) {
    absl::MutexLock lock(&mu_);
    entries_.push_back(std::move(entry));
  }
  // Waits until `count` entries are in; returns them all.
  std::vector<std::string> Await(size_t count) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, count]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return entries_.size() >= count; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(20));
    return entries_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> entries_ ABSL_GUARDED_BY(mu_);
};

SamplePool::Job Logged(Journal& journal, const std::string& name, int items) {
  return {
      items, [&journal, name](int item) { journal.Add(name + std::to_string(item)); },
      [&journal, name](bool completed) { journal.Add(name + (completed ? " done" : " dropped")); }};
}

TEST(SamplePoolTest, OneBatchIsBuiltByEveryThread) {
  constexpr int kThreads = 4;
  Journal journal;  // outlives the pool, whose workers write to it
  SamplePool pool(kThreads);
  const SamplePool::QueueId queue = pool.OpenQueue();
  // Each item waits until all four have started: only four threads working
  // on the same batch at once can finish it.
  std::atomic<int> started{0};
  absl::Mutex mu;
  std::set<std::thread::id> workers;
  pool.Submit(queue, {kThreads,
                      [&](int) {
                        {
                          absl::MutexLock lock(&mu);
                          workers.insert(std::this_thread::get_id());
                        }
                        ++started;
                        const absl::Time give_up = absl::Now() + absl::Seconds(20);
                        while (started.load() < kThreads && absl::Now() < give_up) {
                          absl::SleepFor(absl::Milliseconds(1));
                        }
                      },
                      [&](bool completed) { journal.Add(completed ? "done" : "dropped"); }});
  EXPECT_EQ(journal.Await(1), std::vector<std::string>{"done"});
  absl::MutexLock lock(&mu);
  EXPECT_EQ(workers.size(), static_cast<size_t>(kThreads));
}

TEST(SamplePoolTest, QueuesTakeTurnsItemByItem) {
  Journal journal;
  SamplePool pool(1);
  const SamplePool::QueueId greedy = pool.OpenQueue();
  const SamplePool::QueueId modest = pool.OpenQueue();
  // Hold the only worker until every job is queued, so the order below is
  // the pool's choice alone.
  absl::Notification running;
  absl::Notification queued;
  pool.Submit(greedy, {1,
                       [&](int) {
                         running.Notify();
                         queued.WaitForNotification();
                       },
                       [](bool) {}});
  running.WaitForNotification();
  for (const char* name : {"a", "b", "c"}) {
    pool.Submit(greedy, Logged(journal, name, 2));
  }
  pool.Submit(modest, Logged(journal, "x", 2));
  queued.Notify();
  // The modest queue's one batch finishes first, not after all of the
  // greedy queue's: the pool alternates between the queues, starting with
  // the one that was given nothing yet.
  const std::vector<std::string> entries = journal.Await(9);
  EXPECT_EQ(
      std::vector<std::string>(entries.begin(), entries.begin() + 9),
      (std::vector<std::string>{"x0", "a0", "x1", "x done", "a1", "a done", "b0", "b1", "b done"}));
}

TEST(SamplePoolTest, ACostlyQueueGetsItemsInProportionToTheirCost) {
  Journal journal;
  SamplePool pool(1);
  const SamplePool::QueueId costly = pool.OpenQueue();
  const SamplePool::QueueId cheap = pool.OpenQueue();
  const SamplePool::QueueId holder = pool.OpenQueue();
  absl::Notification running;
  absl::Notification queued;
  pool.Submit(holder, {1,
                       [&](int) {
                         running.Notify();
                         queued.WaitForNotification();
                       },
                       [](bool) {}});
  running.WaitForNotification();
  SamplePool::Job expensive = Logged(journal, "c", 3);
  expensive.item_cost = 10;
  pool.Submit(costly, std::move(expensive));
  pool.Submit(cheap, Logged(journal, "m", 30));
  queued.Notify();
  // Ten cheap items for each costly one: equal work, not equal turns.
  const std::vector<std::string> entries = journal.Await(35);
  std::vector<size_t> costly_at;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].front() == 'c' && entries[i] != "c done") {
      costly_at.push_back(i);
    }
  }
  ASSERT_EQ(costly_at.size(), 3u);
  EXPECT_EQ(costly_at[0], 0u);
  EXPECT_EQ(costly_at[1], 11u);  // after m0..m9
  EXPECT_EQ(costly_at[2], 22u);  // after m10..m19
}

TEST(SamplePoolTest, ClosingAQueueDropsWhatHasNotStarted) {
  Journal journal;
  SamplePool pool(1);
  const SamplePool::QueueId queue = pool.OpenQueue();
  absl::Notification release;
  absl::Notification running;
  pool.Submit(queue,
              {2,
               [&](int item) {
                 journal.Add("first" + std::to_string(item));
                 if (item == 0) {
                   running.Notify();
                   release.WaitForNotification();
                 }
               },
               [&](bool completed) { journal.Add(completed ? "first done" : "first dropped"); }});
  pool.Submit(queue, Logged(journal, "second", 3));
  running.WaitForNotification();
  pool.CloseQueue(queue);
  pool.Submit(queue, Logged(journal, "late", 1));  // after the close
  release.Notify();
  // The first job had started: its item 1 never runs, its done says so
  // after item 0 returned. The others never run an item.
  const std::vector<std::string> entries = journal.Await(4);
  EXPECT_EQ(entries, (std::vector<std::string>{"first0", "first dropped", "second dropped",
                                               "late dropped"}));
}

TEST(SamplePoolTest, DestroyingThePoolDropsQueuedJobsAndFinishesRunningOnes) {
  Journal journal;
  {
    SamplePool pool(1);
    const SamplePool::QueueId queue = pool.OpenQueue();
    absl::Notification running;
    pool.Submit(queue, {1,
                        [&](int) {
                          running.Notify();
                          absl::SleepFor(absl::Milliseconds(50));
                          journal.Add("ran");
                        },
                        [&](bool completed) { journal.Add(completed ? "done" : "dropped"); }});
    running.WaitForNotification();
    for (int i = 0; i < 100; ++i) {
      pool.Submit(queue, Logged(journal, "queued", 1000));
    }
  }
  // Every callback has run by the time the destructor returns.
  const std::vector<std::string> entries = journal.Await(0);
  EXPECT_EQ(std::count(entries.begin(), entries.end(), "queued dropped") +
                std::count(entries.begin(), entries.end(), "queued done"),
            100);
  EXPECT_NE(std::find(entries.begin(), entries.end(), "ran"), entries.end());
  EXPECT_NE(std::find(entries.begin(), entries.end(), "done"), entries.end());
}

TEST(SamplePoolTest, ManyQueuesAndThreadsRunEveryItemOnce) {
  constexpr int kQueues = 8;
  constexpr int kJobs = 50;
  constexpr int kItems = 16;
  std::vector<std::atomic<int>> runs(size_t{kQueues} * kJobs * kItems);
  std::atomic<int> done{0};
  {
    SamplePool pool(4);
    std::vector<std::thread> submitters;
    submitters.reserve(kQueues);
    for (int q = 0; q < kQueues; ++q) {
      submitters.emplace_back([&, q] {
        const SamplePool::QueueId queue = pool.OpenQueue();
        for (int j = 0; j < kJobs; ++j) {
          const int base = (q * kJobs + j) * kItems;
          pool.Submit(queue, {kItems, [&runs, base](int item) { ++runs[base + item]; },
                              [&done](bool completed) { done += completed ? 1 : 1000; }});
        }
      });
    }
    for (std::thread& submitter : submitters) {
      submitter.join();
    }
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    while (done.load() < kQueues * kJobs && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
  EXPECT_EQ(done.load(), kQueues * kJobs);
  for (const std::atomic<int>& count : runs) {
    ASSERT_EQ(count.load(), 1);
  }
}

}  // namespace
}  // namespace heterodl
