#include "src/client/feed_schedule.h"

#include <algorithm>
#include <utility>

namespace heterodl {

FeedSchedule::FeedSchedule(int64_t batches_per_epoch, int connections, FeedOptions options)
    : batches_per_epoch_(std::max<int64_t>(0, batches_per_epoch)),
      last_epoch_(options.last_epoch),
      depth_limits_(options.depth),
      across_epochs_(options.across_epochs),
      window_(std::max(1, options.window)) {
  for (int c = 0; c < connections; ++c) {
    AddConnection();
  }
}

int FeedSchedule::AddConnection() {
  Connection& connection = connections_.emplace_back();
  connection.depth = DepthController(depth_limits_);
  return static_cast<int>(connections_.size()) - 1;
}

void FeedSchedule::Retire(int c) { connections_[c].retired = true; }

int64_t FeedSchedule::Distance(BatchKey key) const {
  const int64_t epochs = static_cast<int64_t>(key.epoch) - next_to_deliver_.epoch;
  return epochs * batches_per_epoch_ + key.index - next_to_deliver_.index;
}

bool FeedSchedule::InWindow(BatchKey key, int window) const {
  if (batches_per_epoch_ == 0 || !(key < end_)) {
    return false;
  }
  const int64_t distance = Distance(key);
  if (!across_epochs_ && key.epoch != next_to_deliver_.epoch) {
    return false;
  }
  return distance >= 0 && distance < window && key.epoch <= last_epoch_;
}

int FeedSchedule::RequestWindow() const {
  int depths = 0;
  for (const Connection& connection : connections_) {
    if (!connection.retired) {
      depths += connection.depth.depth();
    }
  }
  return std::min(window_, 2 * depths);
}

BatchKey FeedSchedule::Following(BatchKey key) const {
  if (key.index + 1 >= batches_per_epoch_) {
    return {key.epoch + 1, 0};
  }
  return {key.epoch, key.index + 1};
}

bool FeedSchedule::Held(BatchKey key) const {
  return asked_of_.count(key) > 0 || received_.count(key) > 0;
}

BatchKey FeedSchedule::TrainerKey() const {
  // At the end of an epoch the trainer stands at (epoch, n): next is
  // (epoch + 1, 0).
  if (next_to_deliver_.index >= batches_per_epoch_) {
    return {next_to_deliver_.epoch + 1, 0};
  }
  return next_to_deliver_;
}

std::optional<BatchKey> FeedSchedule::NextUnheld(int window) {
  // The cursor may have fallen behind the trainer, who took batches that
  // others held while no connection could ask for more: those are behind.
  BatchKey key = std::max(next_unassigned_, TrainerKey());
  while (InWindow(key, window)) {
    if (!Held(key)) {
      next_unassigned_ = Following(key);
      return key;
    }
    key = Following(key);
  }
  next_unassigned_ = key;
  return std::nullopt;
}

void FeedSchedule::Reposition(uint32_t epoch, int64_t start) {
  started_ = true;
  next_to_deliver_ = {epoch, std::clamp<int64_t>(start, 0, batches_per_epoch_)};
  DropUnreachable();
}

void FeedSchedule::SetEnd(BatchKey end) {
  end_ = end;
  DropUnreachable();
}

int FeedSchedule::held_ahead() const { return static_cast<int>(received_.size()); }

int FeedSchedule::in_flight() const {
  int wanted = 0;
  for (const Connection& connection : connections_) {
    wanted += static_cast<int>(connection.wanted.size());
  }
  return wanted;
}

void FeedSchedule::DropUnreachable() {
  // Pruned by the memory bound, not the request window: what was fetched
  // and is still ahead is worth keeping.
  for (auto it = received_.begin(); it != received_.end();) {
    if (InWindow(it->first, window_)) {
      ++it;
    } else {
      it = received_.erase(it);
      ++stats_.dropped;
    }
  }
  for (Connection& connection : connections_) {
    for (auto it = connection.wanted.begin(); it != connection.wanted.end();) {
      if (InWindow(it->first, window_)) {
        ++it;
        continue;
      }
      connection.unwanted.insert(*it);
      asked_of_.erase(it->first);
      it = connection.wanted.erase(it);
    }
  }
  // The scan for work starts over at the trainer: what the new order needs
  // and nobody holds is found again, whatever was asked before.
  next_unassigned_ = TrainerKey();
}

bool FeedSchedule::NextReady() const {
  return started_ && !AtEndOfEpoch() && received_.count(next_to_deliver_) > 0;
}

std::optional<Batch> FeedSchedule::TakeNext() {
  if (!NextReady()) {
    return std::nullopt;
  }
  auto it = received_.find(next_to_deliver_);
  Batch batch = std::move(it->second);
  received_.erase(it);
  // At the end of the epoch the position stays at (epoch, n): same distance
  // as (epoch + 1, 0), so the prefetch goes on.
  ++next_to_deliver_.index;
  ++stats_.delivered;
  return batch;
}

std::vector<BatchKey> FeedSchedule::TakeRequests(int c, absl::Time now) {
  std::vector<BatchKey> keys;
  if (!started_) {
    return keys;
  }
  Connection& connection = connections_[c];
  if (connection.retired) {
    return keys;
  }
  const int window = RequestWindow();
  while (outstanding(c) < connection.depth.depth()) {
    const std::optional<BatchKey> key = NextUnheld(window);
    if (!key) {
      break;
    }
    // A connection's stall clock runs only while it owes batches.
    if (outstanding(c) == 0) {
      connection.last_progress = now;
    }
    connection.wanted.emplace(*key, now);
    asked_of_[*key] = c;
    keys.push_back(*key);
    ++stats_.requested;
  }
  return keys;
}

bool FeedSchedule::Expects(int c, BatchKey key) const {
  const Connection& connection = connections_[c];
  return connection.wanted.count(key) > 0 || connection.unwanted.count(key) > 0;
}

bool FeedSchedule::Receive(int c, BatchKey key, Batch batch, ServerTiming timing, absl::Time now) {
  Connection& connection = connections_[c];
  connection.last_progress = now;
  ++stats_.received;
  if (auto it = connection.wanted.find(key); it != connection.wanted.end()) {
    connection.depth.Observe(now - it->second, timing.queued, timing.built);
    connection.wanted.erase(it);
    asked_of_.erase(key);
    received_.emplace(key, std::move(batch));
    return true;
  }
  if (auto it = connection.unwanted.find(key); it != connection.unwanted.end()) {
    connection.depth.Observe(now - it->second, timing.queued, timing.built);
    connection.unwanted.erase(it);
  }
  ++stats_.dropped;
  return false;
}

void FeedSchedule::Lost(int c) {
  Connection& connection = connections_[c];
  for (const auto& [key, asked] : connection.wanted) {
    asked_of_.erase(key);
    next_unassigned_ = std::min(next_unassigned_, key);
    ++stats_.reassigned;
  }
  connection.wanted.clear();
  connection.unwanted.clear();
  connection.last_progress = absl::InfinitePast();
}

std::vector<int> FeedSchedule::Stalled(absl::Time now, absl::Duration timeout) const {
  std::vector<int> stalled;
  for (size_t c = 0; c < connections_.size(); ++c) {
    if (outstanding(static_cast<int>(c)) > 0 && now - connections_[c].last_progress > timeout) {
      stalled.push_back(static_cast<int>(c));
    }
  }
  return stalled;
}

void FeedSchedule::SetWindow(int window) { window_ = std::max(1, window); }

int FeedSchedule::outstanding(int c) const {
  const Connection& connection = connections_[c];
  return static_cast<int>(connection.wanted.size() + connection.unwanted.size());
}

}  // namespace heterodl
