// ActivityMonitor: what a data server knows of its clients, for the
// decision to leave on its own and for its stats.
//
// A server with no client for the idle timeout (after the first one came),
// or with none ever within the startup timeout, stops by itself: a data host
// whose trainer vanished must not keep billing. A loader holds a stream open
// for as long as it exists, so a trainer between epochs is not idle.
//
//   ActivityMonitor activity;
//   if (activity.TryOpenStream(host, limits) != StreamAdmission::kOpened) return Refuse();
//   ...
//   std::string why = activity.TimeoutReason(idle, startup);  // "" = stay
//
// Thread-safe.
#ifndef HETERODL_SRC_SERVER_ACTIVITY_MONITOR_H_
#define HETERODL_SRC_SERVER_ACTIVITY_MONITOR_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "heterodl/data_service.pb.h"

namespace heterodl {

// How many streams may be open at once.
struct StreamLimits {
  int max_streams = 256;
  // On the connections of one host (PeerHost), so that one client cannot
  // hold every slot; 0: no bound of its own.
  int max_streams_per_host = 0;
};

enum class StreamAdmission {
  kOpened,
  kServerFull,  // max_streams are open
  kHostFull,    // max_streams_per_host are open from that host
};

class ActivityMonitor {
 public:
  // `clock`: where time comes from (tests pass their own).
  explicit ActivityMonitor(std::function<absl::Time()> clock = [] { return absl::Now(); });

  // A stream from `host` opens, unless `limits` say it may not (then
  // nothing changes but the time of activity).
  StreamAdmission TryOpenStream(const std::string& host, const StreamLimits& limits)
      ABSL_LOCKS_EXCLUDED(mu_);
  void StreamClosed(const std::string& host) ABSL_LOCKS_EXCLUDED(mu_);
  // A stream call that has not sent its open request yet: it holds no
  // stream slot while it waits (a few seconds at most). False, changing
  // nothing, when `max_waiting` wait already. How many wait, with it.
  bool TryAcceptUnopenedCall(int max_waiting, int& waiting) ABSL_LOCKS_EXCLUDED(mu_);
  // It opened (then TryOpenStream) or ended.
  void UnopenedCallEnded() ABSL_LOCKS_EXCLUDED(mu_);
  // Any other call of a client's.
  void Touch() ABSL_LOCKS_EXCLUDED(mu_);

  // Why the server should stop on its own now, or "".
  std::string TimeoutReason(absl::Duration idle, absl::Duration startup) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Traffic, for ServerStats: batches requested and not yet sent (over all
  // streams), sent (with the time from ready to sent), streams with a pixel
  // channel.
  void BatchesRequested(int count) ABSL_LOCKS_EXCLUDED(mu_);
  void BatchSent(absl::Duration since_ready) ABSL_LOCKS_EXCLUDED(mu_);
  void PixelChannelStreams(int delta) ABSL_LOCKS_EXCLUDED(mu_);
  // Streams opened since start, and how many of them had a pixel channel.
  std::pair<int64_t, int64_t> StreamsServed() const ABSL_LOCKS_EXCLUDED(mu_);
  void AddTo(v1::ServerStats& stats) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const std::function<absl::Time()> clock_;
  const absl::Time start_;
  mutable absl::Mutex mu_;
  int open_streams_ ABSL_GUARDED_BY(mu_) = 0;
  // Hosts with streams open, and how many.
  absl::flat_hash_map<std::string, int> streams_per_host_ ABSL_GUARDED_BY(mu_);
  int unopened_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int batches_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int pixel_channel_streams_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t streams_served_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t pixel_channel_streams_served_ ABSL_GUARDED_BY(mu_) = 0;
  double send_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  bool ever_connected_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_activity_ ABSL_GUARDED_BY(mu_);
};

}  // namespace heterodl

#endif  // HETERODL_SRC_SERVER_ACTIVITY_MONITOR_H_
