#include "src/client/feed_schedule.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace heterodl {
namespace {

constexpr uint32_t kLastEpoch = 1'000'000;
const absl::Time kStart = absl::FromUnixSeconds(1'000'000);

BatchKey Key(uint32_t epoch, int64_t index) { return {epoch, index}; }

void PrintTo(const BatchKey& key, std::ostream* out) {
  *out << "(" << key.epoch << "," << key.index << ")";
}

Batch Made(BatchKey key) {
  Batch batch;
  batch.epoch = key.epoch;
  batch.index = key.index;
  return batch;
}

FeedOptions Options(int window, DepthLimits depth, bool across_epochs = true) {
  FeedOptions options;
  options.window = window;
  options.last_epoch = kLastEpoch;
  options.across_epochs = across_epochs;
  options.depth = depth;
  return options;
}

// A fake cluster around a schedule: connections that answer in the order
// asked (or not at all), and a trainer that reads.
class Harness {
 public:
  Harness(int64_t batches_per_epoch, int connections, int window, DepthLimits depth = {},
          bool across_epochs = true)
      : schedule(batches_per_epoch, connections, Options(window, depth, across_epochs)),
        asked(static_cast<size_t>(connections)) {}

  // Every connection asks for what it may.
  void Ask() {
    for (size_t c = 0; c < asked.size(); ++c) {
      for (BatchKey key : schedule.TakeRequests(static_cast<int>(c), now)) {
        asked[c].push_back(key);
      }
    }
  }
  // Connection `c` answers its oldest request; returns whether it had one.
  bool Answer(int c) {
    if (asked[c].empty()) {
      return false;
    }
    const BatchKey key = asked[c].front();
    asked[c].erase(asked[c].begin());
    EXPECT_TRUE(schedule.Expects(c, key));
    schedule.Receive(c, key, Made(key), {}, now);
    return true;
  }
  void AnswerAll() {
    Ask();
    bool any = true;
    while (any) {
      any = false;
      for (size_t c = 0; c < asked.size(); ++c) {
        any = Answer(static_cast<int>(c)) || any;
      }
      Ask();
    }
  }
  // Reads what is ready; returns the keys read.
  std::vector<BatchKey> Read() {
    std::vector<BatchKey> read;
    while (std::optional<Batch> batch = schedule.TakeNext()) {
      read.push_back({batch->epoch, batch->index});
    }
    return read;
  }
  // Answers and reads until the epoch ends.
  std::vector<BatchKey> ReadEpoch() {
    std::vector<BatchKey> read;
    for (int round = 0; round < 10'000 && !schedule.AtEndOfEpoch(); ++round) {
      Ask();
      for (size_t c = 0; c < asked.size(); ++c) {
        Answer(static_cast<int>(c));
      }
      for (BatchKey key : Read()) {
        read.push_back(key);
      }
    }
    return read;
  }
  void Lose(int c) {
    asked[c].clear();
    schedule.Lost(c);
  }
  int Join() {
    asked.emplace_back();
    return schedule.AddConnection();
  }

  FeedSchedule schedule;
  std::vector<std::vector<BatchKey>> asked;
  absl::Time now = kStart;
};

std::vector<BatchKey> Epoch(uint32_t epoch, int64_t from, int64_t to) {
  std::vector<BatchKey> keys;
  for (int64_t k = from; k < to; ++k) {
    keys.push_back(Key(epoch, k));
  }
  return keys;
}

TEST(FeedScheduleTest, NothingIsAskedBeforeTheTrainerSaysWhere) {
  Harness harness(10, 2, 8);
  harness.Ask();
  EXPECT_TRUE(harness.asked[0].empty());
  EXPECT_FALSE(harness.schedule.AtEndOfEpoch());
  EXPECT_FALSE(harness.schedule.TakeNext().has_value());
}

TEST(FeedScheduleTest, AnEpochOfNoBatchesEndsAtOnceAndAsksForNothing) {
  // 512 samples, batch 1000, drop_last: every epoch is empty, as a
  // DataLoader's would be.
  Harness harness(0, 2, 8);
  harness.schedule.Reposition(0, 0);
  harness.Ask();
  EXPECT_TRUE(harness.asked[0].empty());
  EXPECT_TRUE(harness.asked[1].empty());
  EXPECT_TRUE(harness.schedule.AtEndOfEpoch());
  EXPECT_FALSE(harness.schedule.TakeNext().has_value());
  harness.schedule.Reposition(1, 0);
  harness.Ask();
  EXPECT_TRUE(harness.asked[0].empty());
  EXPECT_TRUE(harness.schedule.AtEndOfEpoch());
  EXPECT_EQ(harness.schedule.stats().requested, 0);
}

TEST(FeedScheduleTest, NothingAtOrPastTheEndIsAskedFor) {
  DepthLimits depth;
  depth.min_depth = depth.max_depth = depth.initial_depth = 8;
  // A 3-step run of 100-batch epochs: the window would ask for 16.
  Harness harness(100, 2, 32, depth);
  harness.schedule.SetEnd(Key(0, 3));
  harness.schedule.Reposition(0, 0);
  harness.Ask();
  EXPECT_EQ(harness.asked[0].size() + harness.asked[1].size(), 3u);
  harness.AnswerAll();
  EXPECT_EQ(harness.Read(), Epoch(0, 0, 3));
  EXPECT_EQ(harness.schedule.stats().requested, 3);
  EXPECT_EQ(harness.schedule.held_ahead(), 0);
  EXPECT_EQ(harness.schedule.in_flight(), 0);

  // The last of two epochs: its end is the run's, and the next epoch's
  // first batches are not fetched ahead.
  Harness epochs(4, 1, 32, depth);
  epochs.schedule.SetEnd(Key(1, 4));
  epochs.schedule.Reposition(0, 0);
  EXPECT_EQ(epochs.ReadEpoch(), Epoch(0, 0, 4));
  epochs.schedule.Reposition(1, 0);
  EXPECT_EQ(epochs.ReadEpoch(), Epoch(1, 0, 4));
  EXPECT_EQ(epochs.schedule.stats().requested, 8);
  EXPECT_EQ(epochs.schedule.stats().dropped, 0);
}

TEST(FeedScheduleTest, AnEndSetLateDropsWhatLiesPastIt) {
  DepthLimits depth;
  depth.min_depth = depth.max_depth = depth.initial_depth = 4;
  Harness harness(100, 1, 32, depth);
  harness.schedule.Reposition(0, 0);
  harness.Ask();
  harness.Answer(0);
  harness.Answer(0);  // batches 0 and 1 held; 2 and 3 in flight
  EXPECT_EQ(harness.schedule.held_ahead(), 2);
  EXPECT_EQ(harness.schedule.in_flight(), 2);
  harness.schedule.SetEnd(Key(0, 1));
  EXPECT_EQ(harness.schedule.held_ahead(), 1);
  EXPECT_EQ(harness.schedule.in_flight(), 0);
  EXPECT_EQ(harness.schedule.stats().dropped, 1);
  EXPECT_EQ(harness.Read(), Epoch(0, 0, 1));
}

TEST(FeedScheduleTest, AnEpochIsDeliveredInOrderOnceAcrossConnections) {
  Harness harness(25, 3, 8);
  harness.schedule.Reposition(0, 0);
  EXPECT_EQ(harness.ReadEpoch(), Epoch(0, 0, 25));
  EXPECT_TRUE(harness.schedule.AtEndOfEpoch());
  EXPECT_FALSE(harness.schedule.TakeNext().has_value());
  EXPECT_EQ(harness.schedule.stats().delivered, 25);
}

TEST(FeedScheduleTest, DepthAndWindowBoundWhatIsAsked) {
  DepthLimits depth;
  depth.min_depth = depth.max_depth = depth.initial_depth = 3;
  Harness harness(100, 2, 5, depth);
  harness.schedule.Reposition(0, 0);
  harness.Ask();
  // Connection 0 takes its depth (3), connection 1 what the window leaves.
  EXPECT_EQ(harness.asked[0], Epoch(0, 0, 3));
  EXPECT_EQ(harness.asked[1], Epoch(0, 3, 5));
  // Received but unread batches still count against the window.
  harness.Answer(0);
  harness.Ask();
  EXPECT_EQ(harness.asked[0].size(), 2u);
  EXPECT_EQ(harness.asked[1].size(), 2u);
  // Reading moves the window: one more may be asked.
  ASSERT_EQ(harness.Read(), Epoch(0, 0, 1));
  harness.Ask();
  EXPECT_EQ(harness.asked[0], (std::vector<BatchKey>{Key(0, 1), Key(0, 2), Key(0, 5)}));
  EXPECT_EQ(harness.asked[1], Epoch(0, 3, 5));
}

TEST(FeedScheduleTest, TheNextEpochIsFetchedBeforeTheTrainerAsks) {
  Harness harness(4, 1, 6);
  harness.schedule.Reposition(7, 0);
  EXPECT_EQ(harness.ReadEpoch(), Epoch(7, 0, 4));
  // At the boundary, the window already reached into epoch 8.
  harness.AnswerAll();
  harness.Ask();
  EXPECT_FALSE(harness.schedule.TakeNext().has_value());  // epoch 7 is over
  harness.schedule.Reposition(8, 0);
  EXPECT_TRUE(harness.schedule.NextReady());
  EXPECT_EQ(harness.Read(), Epoch(8, 0, 4));
  EXPECT_EQ(harness.schedule.stats().dropped, 0);
}

TEST(FeedScheduleTest, WithoutPrefetchAcrossEpochsTheWindowStopsAtTheEpochsEnd) {
  Harness harness(4, 1, 6, {}, /*across_epochs=*/false);
  harness.schedule.Reposition(0, 0);
  harness.AnswerAll();
  EXPECT_EQ(harness.schedule.stats().requested, 4);
  EXPECT_EQ(harness.ReadEpoch(), Epoch(0, 0, 4));
  harness.AnswerAll();
  EXPECT_EQ(harness.schedule.stats().requested, 4);
  harness.schedule.Reposition(1, 0);
  harness.AnswerAll();
  EXPECT_EQ(harness.Read(), Epoch(1, 0, 4));
}

TEST(FeedScheduleTest, OneBatchEpochsKeepTheWholeWindowInFlight) {
  DepthLimits depth;
  depth.initial_depth = 8;
  Harness harness(1, 1, 8, depth);
  harness.schedule.Reposition(0, 0);
  harness.Ask();
  // Eight epochs ahead, not one batch.
  ASSERT_EQ(harness.asked[0].size(), 8u);
  EXPECT_EQ(harness.asked[0].back(), Key(7, 0));
  for (uint32_t epoch = 0; epoch < 50; ++epoch) {
    harness.schedule.Reposition(epoch, 0);
    harness.Answer(0);
    harness.Ask();
    ASSERT_EQ(harness.Read(), Epoch(epoch, 0, 1));
    ASSERT_TRUE(harness.schedule.AtEndOfEpoch());
  }
  EXPECT_EQ(harness.schedule.stats().dropped, 0);
}

TEST(FeedScheduleTest, RepositioningElsewhereDropsWhatTheNewOrderDoesNotReach) {
  Harness harness(10, 2, 6);
  harness.schedule.Reposition(0, 0);
  harness.Ask();
  harness.Answer(0);  // (0,0) received, the rest in flight
  // Resume somewhere else: epoch 3, batch 4.
  harness.schedule.Reposition(3, 4);
  harness.Ask();
  // Batches of epoch 0 still in flight arrive and are dropped; what is
  // asked now is epoch 3 from batch 4.
  std::vector<BatchKey> new_asks;
  for (auto& asked : harness.asked) {
    for (BatchKey key : asked) {
      if (key.epoch == 3) {
        new_asks.push_back(key);
      }
    }
  }
  std::sort(new_asks.begin(), new_asks.end());
  ASSERT_FALSE(new_asks.empty());
  EXPECT_EQ(new_asks.front(), Key(3, 4));
  const std::vector<BatchKey> read = harness.ReadEpoch();
  EXPECT_EQ(read, Epoch(3, 4, 10));
  const FeedStats& stats = harness.schedule.stats();
  // Dropped: the received (0,0) and every (0,k) that was in flight.
  EXPECT_EQ(stats.dropped, 6);
  EXPECT_EQ(stats.delivered, 6);
}

TEST(FeedScheduleTest, ResumingWithinTheWindowKeepsWhatItCan) {
  Harness harness(10, 1, 6);
  harness.schedule.Reposition(2, 0);
  harness.AnswerAll();  // (2,0)..(2,5) received
  harness.schedule.Reposition(2, 3);
  harness.AnswerAll();
  EXPECT_EQ(harness.schedule.stats().dropped, 3);  // (2,0)..(2,2)
  EXPECT_EQ(harness.ReadEpoch(), Epoch(2, 3, 10));
}

TEST(FeedScheduleTest, GoingBackOverDeliveredBatchesAsksForThemAgain) {
  Harness harness(5, 1, 3);
  harness.schedule.Reposition(0, 0);
  EXPECT_EQ(harness.ReadEpoch(), Epoch(0, 0, 5));
  // The same epoch again (a second pass of a Python `for` over it).
  harness.schedule.Reposition(0, 0);
  EXPECT_EQ(harness.ReadEpoch(), Epoch(0, 0, 5));
}

TEST(FeedScheduleTest, ALostConnectionsBatchesGoToTheOthersExactlyOnce) {
  Harness harness(30, 3, 12);
  harness.schedule.Reposition(0, 0);
  std::vector<BatchKey> read;
  // Connection 1 dies twice with batches outstanding, once right at the
  // epoch boundary (holding keys of both epochs).
  for (int round = 0; round < 1000 && read.size() < 60; ++round) {
    harness.Ask();
    harness.Answer(0);
    harness.Answer(2);
    if (round == 3) {
      harness.Lose(1);
    }
    if (round % 2 == 0) {
      harness.Answer(1);
    }
    for (BatchKey key : harness.Read()) {
      read.push_back(key);
    }
    if (harness.schedule.AtEndOfEpoch()) {
      if (!harness.asked[1].empty()) {
        harness.Lose(1);
      }
      harness.schedule.Reposition(1, 0);
    }
  }
  std::vector<BatchKey> expected = Epoch(0, 0, 30);
  for (BatchKey key : Epoch(1, 0, 30)) {
    expected.push_back(key);
  }
  EXPECT_EQ(read, expected);
  EXPECT_GT(harness.schedule.stats().reassigned, 0);
}

TEST(FeedScheduleTest, ConnectionsJoiningAndRetiringMidEpochDeliverExactlyOnce) {
  Harness harness(40, 1, 16);
  harness.schedule.Reposition(0, 0);
  std::vector<BatchKey> read;
  // One server, then two more join; one of them is removed while it owes
  // batches (some of which it still delivers), the first one is lost.
  for (int round = 0; round < 1000 && read.size() < 40; ++round) {
    if (round == 2) {
      EXPECT_EQ(harness.Join(), 1);
      EXPECT_EQ(harness.Join(), 2);
    }
    harness.Ask();
    if (round == 5) {
      ASSERT_FALSE(harness.asked[1].empty());
      harness.schedule.Retire(1);
      harness.Answer(1);  // delivered after its removal: still kept
      harness.Lose(1);
    }
    if (round == 8) {
      harness.Lose(0);
    }
    for (size_t c = 0; c < harness.asked.size(); ++c) {
      harness.Answer(static_cast<int>(c));
    }
    for (BatchKey key : harness.Read()) {
      read.push_back(key);
    }
  }
  EXPECT_EQ(read, Epoch(0, 0, 40));
  EXPECT_TRUE(harness.schedule.retired(1));
  EXPECT_EQ(harness.schedule.outstanding(1), 0);
}

TEST(FeedScheduleTest, ARetiredConnectionIsAskedNothingAndLeavesTheWindow) {
  Harness harness(100, 2, 64, DepthLimits{.min_depth = 4, .max_depth = 4, .initial_depth = 4});
  harness.schedule.Reposition(0, 0);
  harness.Ask();
  EXPECT_EQ(harness.schedule.window(), 16);  // twice the two depths
  harness.schedule.Retire(0);
  harness.Lose(0);
  EXPECT_EQ(harness.schedule.window(), 8);
  harness.Ask();
  EXPECT_TRUE(harness.asked[0].empty());
  EXPECT_EQ(harness.asked[1].size(), 4u);
  // With none left, nothing is asked until one joins.
  harness.schedule.Retire(1);
  harness.Lose(1);
  harness.Ask();
  EXPECT_EQ(harness.schedule.window(), 0);
  const int c = harness.Join();
  harness.Ask();
  EXPECT_EQ(harness.asked[c].size(), 4u);
  EXPECT_EQ(harness.asked[c].front(), Key(0, 0));
}

TEST(FeedScheduleTest, ABatchArrivingOnTheWrongConnectionIsNotExpected) {
  Harness harness(10, 2, 4);
  harness.schedule.Reposition(0, 0);
  harness.Ask();
  const BatchKey on_zero = harness.asked[0].front();
  EXPECT_TRUE(harness.schedule.Expects(0, on_zero));
  EXPECT_FALSE(harness.schedule.Expects(1, on_zero));
  EXPECT_FALSE(harness.schedule.Expects(0, Key(0, 9)));  // never asked
  EXPECT_FALSE(harness.schedule.Expects(0, Key(5, 0)));
}

TEST(FeedScheduleTest, StalledConnectionsAreThoseOwingBatchesWithoutProgress) {
  DepthLimits depth;
  depth.min_depth = depth.max_depth = depth.initial_depth = 2;
  Harness harness(10, 2, 4, depth);
  harness.schedule.Reposition(0, 0);
  harness.Ask();
  harness.now += absl::Seconds(5);
  harness.Answer(0);
  harness.now += absl::Seconds(10);
  EXPECT_EQ(harness.schedule.Stalled(harness.now, absl::Seconds(12)), std::vector<int>{1});
  harness.schedule.ResetStallClock(1, harness.now);
  EXPECT_TRUE(harness.schedule.Stalled(harness.now, absl::Seconds(12)).empty());
  // A connection owing nothing is never stalled, however long it idles.
  harness.Lose(1);
  harness.now += absl::Hours(1);
  harness.AnswerAll();
  EXPECT_TRUE(harness.schedule.Stalled(harness.now, absl::Seconds(12)).empty());
}

TEST(FeedScheduleTest, NothingBeyondTheLastEpochIsAsked) {
  FeedOptions options;
  options.window = 10;
  options.last_epoch = 3;
  FeedSchedule schedule(2, 1, options);
  schedule.Reposition(3, 0);
  const std::vector<BatchKey> keys = schedule.TakeRequests(0, kStart);
  for (BatchKey key : keys) {
    EXPECT_EQ(key.epoch, 3u);
  }
}

TEST(FeedScheduleTest, KeysLostWhileNoConnectionCouldTakeThemAreAskedForLater) {
  // The trainer takes batches others held while the only live connection
  // was full: the lost keys' place in the scan falls behind the trainer,
  // and what lies ahead of it must still be found.
  DepthLimits depth;
  depth.min_depth = depth.max_depth = depth.initial_depth = 2;
  Harness harness(10, 2, 8, depth);
  harness.schedule.Reposition(0, 0);
  harness.Ask();  // 0 asks (0,0),(0,1); 1 asks (0,2),(0,3)
  harness.Answer(0);
  harness.Answer(0);
  harness.Ask();    // 0 asks (0,4),(0,5)
  harness.Lose(1);  // (0,2),(0,3) back; 0 is full
  // The window moves on as the trainer reads (0,0) and (0,1).
  EXPECT_EQ(harness.Read(), Epoch(0, 0, 2));
  harness.Answer(0);
  harness.Answer(0);
  // Everything still reaches the trainer once.
  std::vector<BatchKey> rest;
  for (int round = 0; round < 100 && !harness.schedule.AtEndOfEpoch(); ++round) {
    harness.Ask();
    harness.Answer(0);
    harness.Answer(1);
    for (BatchKey key : harness.Read()) {
      rest.push_back(key);
    }
  }
  EXPECT_EQ(rest, Epoch(0, 2, 10));
}

TEST(FeedScheduleTest, RepositionedWhileEveryConnectionIsFullTheScanStillFindsWork) {
  DepthLimits depth;
  depth.min_depth = depth.max_depth = depth.initial_depth = 3;
  Harness harness(20, 1, 6, depth);
  harness.schedule.Reposition(0, 0);
  harness.Ask();                      // (0,0)..(0,2), the connection full
  harness.schedule.Reposition(0, 0);  // the same place again: the scan restarts
  for (int i = 0; i < 3; ++i) {
    harness.Answer(0);
  }
  // Read past where the scan restarted before any ask.
  EXPECT_EQ(harness.Read(), Epoch(0, 0, 3));
  std::vector<BatchKey> rest;
  for (int round = 0; round < 100 && !harness.schedule.AtEndOfEpoch(); ++round) {
    harness.Ask();
    harness.Answer(0);
    for (BatchKey key : harness.Read()) {
      rest.push_back(key);
    }
  }
  EXPECT_EQ(rest, Epoch(0, 3, 20));
}

TEST(DepthControllerTest, StartsAtItsInitialDepth) {
  DepthController controller;
  EXPECT_EQ(controller.depth(), 4);
  EXPECT_FALSE(controller.measured());
}

TEST(DepthControllerTest, CoversBuildingQueuedAndInTransit) {
  DepthController controller;
  // A fast network: transit is a tenth of a build -> 2 + ceil(0.15) = 3.
  for (int i = 0; i < 50; ++i) {
    controller.Observe(absl::Milliseconds(120), absl::Milliseconds(10), absl::Milliseconds(100));
  }
  EXPECT_EQ(controller.depth(), 3);
  // Transit of four builds -> 2 + ceil(6) = 8.
  for (int i = 0; i < 50; ++i) {
    controller.Observe(absl::Milliseconds(500), absl::Milliseconds(0), absl::Milliseconds(100));
  }
  EXPECT_EQ(controller.depth(), 8);
}

TEST(DepthControllerTest, QueueingDoesNotFeedBackIntoTheDepth) {
  DepthController controller;
  // However long batches wait in the server's queue, transit is the same.
  for (int queued_ms : {0, 100, 1000, 10'000}) {
    for (int i = 0; i < 50; ++i) {
      controller.Observe(absl::Milliseconds(queued_ms + 120), absl::Milliseconds(queued_ms),
                         absl::Milliseconds(100));
    }
    EXPECT_EQ(controller.depth(), 3) << queued_ms;
  }
}

TEST(DepthControllerTest, BoundedWhateverTheServerClaims) {
  DepthLimits limits;
  limits.max_depth = 16;
  DepthController controller(limits);
  controller.Observe(absl::Seconds(10), absl::ZeroDuration(), absl::ZeroDuration());
  EXPECT_EQ(controller.depth(), 16);
  // Times longer than the round trip, negative times: clipped.
  controller.Observe(absl::Milliseconds(10), absl::Seconds(100), absl::Seconds(-5));
  controller.Observe(absl::Milliseconds(-10), absl::Seconds(-1), absl::Seconds(100));
  EXPECT_GE(controller.depth(), 2);
  EXPECT_LE(controller.depth(), 16);
  controller.SetMaxDepth(4);
  EXPECT_LE(controller.depth(), 4);
  controller.SetMaxDepth(0);
  EXPECT_EQ(controller.depth(), 2);  // never below the minimum
}

}  // namespace
}  // namespace heterodl
