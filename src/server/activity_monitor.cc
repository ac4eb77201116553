#include "src/server/activity_monitor.h"

#include "absl/strings/str_cat.h"

namespace heterodl {

ActivityMonitor::ActivityMonitor(std::function<absl::Time()> clock)
    : clock_(std::move(clock)), start_(clock_()), last_activity_(start_) {}

StreamAdmission ActivityMonitor::TryOpenStream(const std::string& host,
                                               const StreamLimits& limits) {
  absl::MutexLock lock(&mu_);
  ever_connected_ = true;
  last_activity_ = clock_();
  if (open_streams_ >= limits.max_streams) {
    return StreamAdmission::kServerFull;
  }
  int& of_host = streams_per_host_[host];
  if (limits.max_streams_per_host > 0 && of_host >= limits.max_streams_per_host) {
    if (of_host == 0) {
      streams_per_host_.erase(host);
    }
    return StreamAdmission::kHostFull;
  }
  ++of_host;
  ++open_streams_;
  ++streams_served_;
  return StreamAdmission::kOpened;
}

bool ActivityMonitor::TryAcceptUnopenedCall(int max_waiting, int& waiting) {
  absl::MutexLock lock(&mu_);
  if (unopened_calls_ >= max_waiting) {
    waiting = unopened_calls_;
    return false;
  }
  waiting = ++unopened_calls_;
  return true;
}

void ActivityMonitor::UnopenedCallEnded() {
  absl::MutexLock lock(&mu_);
  --unopened_calls_;
}

void ActivityMonitor::StreamClosed(const std::string& host) {
  absl::MutexLock lock(&mu_);
  --open_streams_;
  if (auto it = streams_per_host_.find(host); it != streams_per_host_.end() && --it->second <= 0) {
    streams_per_host_.erase(it);
  }
  last_activity_ = clock_();
}

void ActivityMonitor::Touch() {
  absl::MutexLock lock(&mu_);
  ever_connected_ = true;
  last_activity_ = clock_();
}

std::string ActivityMonitor::TimeoutReason(absl::Duration idle, absl::Duration startup) const {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_();
  if (!ever_connected_ && now - start_ > startup) {
    return absl::StrCat("no client came within the startup timeout of ",
                        absl::FormatDuration(startup));
  }
  if (ever_connected_ && open_streams_ == 0 && now - last_activity_ > idle) {
    return absl::StrCat("no client for the idle timeout of ", absl::FormatDuration(idle));
  }
  return "";
}

void ActivityMonitor::BatchesRequested(int count) {
  absl::MutexLock lock(&mu_);
  batches_in_flight_ += count;
}

void ActivityMonitor::BatchSent(absl::Duration since_ready) {
  absl::MutexLock lock(&mu_);
  --batches_in_flight_;
  send_seconds_ += absl::ToDoubleSeconds(since_ready);
}

void ActivityMonitor::PixelChannelStreams(int delta) {
  absl::MutexLock lock(&mu_);
  pixel_channel_streams_ += delta;
  if (delta > 0) {
    pixel_channel_streams_served_ += delta;
  }
}

std::pair<int64_t, int64_t> ActivityMonitor::StreamsServed() const {
  absl::MutexLock lock(&mu_);
  return {streams_served_, pixel_channel_streams_served_};
}

void ActivityMonitor::AddTo(v1::ServerStats& stats) const {
  absl::MutexLock lock(&mu_);
  stats.set_active_streams(open_streams_);
  stats.set_pixel_channel_streams(static_cast<uint32_t>(pixel_channel_streams_));
  stats.set_batches_in_flight(static_cast<uint32_t>(batches_in_flight_));
  stats.set_send_seconds(send_seconds_);
}

}  // namespace heterodl
