// FeedSchedule: the remote loader's decisions, free of sockets and threads.
// Which batch each server connection asks for next, how many it keeps asked
// for, what goes back when a connection fails, the reorder buffer the trainer
// reads from in order, and the prefetch that runs past the end of an epoch
// into the next ones.
//
// The trainer reads one sequence of batches: epoch e's batches 0..n-1, then
// e+1's, and so on (n batches per epoch for this rank). The schedule asks for
// batches of that sequence up to `window` ahead of the trainer, whatever the
// epoch, so the first batches of epoch e+1 are built while e is still being
// trained on: Reposition(e + 1, 0) at the boundary finds them ready. When the
// trainer repositions elsewhere (another epoch, a resume point), the batches
// held that the new order does not reach are dropped and counted; batches
// still in flight that it no longer wants are discarded on arrival.
//
// Exactly once: a batch is delivered only at the trainer's position and only
// from the reorder buffer, and a key is asked of at most one connection at a
// time (it goes back to the schedule only when that connection is lost).
//
//   FeedSchedule schedule(batches_per_epoch, connections, options);
//   schedule.Reposition(epoch, 0);
//   for (BatchKey key : schedule.TakeRequests(c, now)) SendRequest(c, key);
//   ... a batch arrives on connection c:
//   if (schedule.Expects(c, key)) schedule.Receive(c, key, std::move(batch), timing, now);
//   ... the trainer:
//   if (std::optional<Batch> batch = schedule.TakeNext()) Train(*batch);
//   else if (schedule.AtEndOfEpoch()) ...;
//
// Not thread-safe: the loader keeps it under its lock.
#ifndef HETERODL_SRC_CLIENT_FEED_SCHEDULE_H_
#define HETERODL_SRC_CLIENT_FEED_SCHEDULE_H_

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "absl/time/time.h"
#include "src/client/batch.h"
#include "src/client/depth_controller.h"
#include "src/plan/epoch_plan.h"

namespace heterodl {

// What a server says about the batch it sent (v1::Batch's timing fields).
struct ServerTiming {
  absl::Duration queued;
  absl::Duration built;
};

struct FeedStats {
  int64_t requested = 0;  // keys asked for, over all connections
  int64_t received = 0;   // batches that arrived (kept or not)
  int64_t delivered = 0;  // handed to the trainer
  // Built and thrown away: held or in flight when the trainer repositioned
  // where the new order does not reach them.
  int64_t dropped = 0;
  // Keys asked again of another connection after theirs was lost.
  int64_t reassigned = 0;
};

struct FeedOptions {
  // Batches held ahead of the trainer (asked for or received, not yet
  // taken): the memory bound. Within it the schedule holds at most twice
  // what its connections keep requested (their depths): one pipe's worth in
  // flight, one ready, so a short job wastes little past its last epoch.
  int window = 16;
  // No key beyond this epoch is asked for (servers refuse larger epochs).
  uint32_t last_epoch = kMaxEpoch;
  // Whether the window runs on into the following epochs; false stops it at
  // the end of the trainer's epoch (the bubble every epoch used to start
  // with, kept to measure it).
  bool across_epochs = true;
  DepthLimits depth;
};

class FeedSchedule {
 public:
  // `batches_per_epoch` >= 0 for this rank (with none, every epoch ends at
  // once and nothing is asked for); `connections` >= 0 streams numbered
  // 0..connections-1 (more join with AddConnection).
  FeedSchedule(int64_t batches_per_epoch, int connections, FeedOptions options = {});

  // ---- The trainer's side.

  // Moves the trainer to batch `start` of `epoch` (0 <= start <=
  // batches_per_epoch). Until the first call nothing is asked for.
  void Reposition(uint32_t epoch, int64_t start);
  // The trainer reads nothing at or after `end` (the end of a run's last
  // epoch, or a step count's batch): nothing there is asked for, and what
  // was is dropped. Until called, the sequence has no end.
  void SetEnd(BatchKey end);
  // The next batch the trainer reads.
  BatchKey position() const { return next_to_deliver_; }
  // True once the trainer has read the epoch's last batch.
  bool AtEndOfEpoch() const { return started_ && next_to_deliver_.index >= batches_per_epoch_; }
  // True when TakeNext() would return a batch.
  bool NextReady() const;
  // The batch at the trainer's position, once it has arrived; the position
  // moves one on. nullopt when it has not arrived, or at the end of the
  // epoch.
  std::optional<Batch> TakeNext();

  // ---- The connections' side.

  // Keys connection `c` should ask for now: the earliest not held by
  // anyone, while `c` has fewer outstanding than its depth and they lie in
  // the window. Each returned key counts as asked of `c` from `now`.
  std::vector<BatchKey> TakeRequests(int c, absl::Time now);
  // Whether `key` is one `c` asked for and has not received: anything else
  // arriving on `c` is a protocol error.
  bool Expects(int c, BatchKey key) const;
  // A batch that arrived on `c`; true when kept for the trainer, false when
  // the trainer no longer wants it (it was repositioned past it): then the
  // batch is dropped and counted. REQUIRES: Expects(c, key).
  bool Receive(int c, BatchKey key, Batch batch, ServerTiming timing, absl::Time now);
  // Connection `c`'s stream ended: the keys it was asked for go back to the
  // schedule, to be asked of others (or of it, once it is back).
  void Lost(int c);
  // Connections with batches outstanding and none received for `timeout`.
  std::vector<int> Stalled(absl::Time now, absl::Duration timeout) const;
  // Restarts `c`'s stall clock (after cancelling its stream).
  void ResetStallClock(int c, absl::Time now) { connections_[c].last_progress = now; }
  // A new connection (a data server that joined): its number, the next
  // after the last. It asks for work from its next TakeRequests.
  int AddConnection();
  // Connection `c` is leaving for good (its server was removed): it is
  // asked nothing more and no longer counts toward the window. What it
  // still owes may yet arrive; Lost(c) gives the rest back.
  void Retire(int c);
  bool retired(int c) const { return connections_[c].retired; }
  int connections() const { return static_cast<int>(connections_.size()); }

  // ---- Limits, measurements.

  // The memory bound, as batches, when the batch size in bytes is learnt.
  void SetWindow(int window);
  // The server's limit on one stream's outstanding batches.
  void SetMaxDepth(int c, int max_depth) { connections_[c].depth.SetMaxDepth(max_depth); }
  // What requests are made within now (<= the memory bound).
  int window() const { return RequestWindow(); }
  int depth(int c) const { return connections_[c].depth.depth(); }
  int outstanding(int c) const;
  // Batches built for the trainer and not yet taken: received and held, and
  // asked of a connection (wanted) and not arrived. Were the run to end
  // now, they would have been built for nothing.
  int held_ahead() const;
  int in_flight() const;
  const DepthController& depth_controller(int c) const { return connections_[c].depth; }
  const FeedStats& stats() const { return stats_; }

 private:
  struct Connection {
    // Asked for and wanted, with when.
    std::map<BatchKey, absl::Time> wanted;
    // Asked for, then repositioned away from: discarded on arrival.
    std::map<BatchKey, absl::Time> unwanted;
    absl::Time last_progress = absl::InfinitePast();
    DepthController depth;
    bool retired = false;
  };

  // Drops the received batches and forgets the requests that the trainer's
  // order no longer reaches (its position moved, or the end).
  void DropUnreachable();
  // Batches from the trainer's position to `key` (negative: before it).
  int64_t Distance(BatchKey key) const;
  // Whether `key` lies where the trainer will still read it, less than
  // `window` batches ahead (and within last_epoch).
  bool InWindow(BatchKey key, int window) const;
  // The window requests are made within: the memory bound, or twice the
  // connections' depths if that is less.
  int RequestWindow() const;
  // The key after `key` in the sequence.
  BatchKey Following(BatchKey key) const;
  // The next key the trainer reads (past an epoch's end: the next epoch's
  // first).
  BatchKey TrainerKey() const;
  // Held: received, or asked of some connection and wanted.
  bool Held(BatchKey key) const;
  std::optional<BatchKey> NextUnheld(int window);

  const int64_t batches_per_epoch_;
  const uint32_t last_epoch_;
  const DepthLimits depth_limits_;
  const bool across_epochs_;
  int window_;
  bool started_ = false;
  BatchKey end_{std::numeric_limits<uint32_t>::max(), 0};
  BatchKey next_to_deliver_;
  // Where the scan for keys to ask for resumes: every key from the trainer
  // to it is held or was taken; keys from it on may or may not be held (a
  // lost connection's keys move it back). It may fall behind the trainer.
  BatchKey next_unassigned_;
  // Which connection holds each wanted key.
  std::map<BatchKey, int> asked_of_;
  std::map<BatchKey, Batch> received_;
  std::vector<Connection> connections_;
  FeedStats stats_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_CLIENT_FEED_SCHEDULE_H_
