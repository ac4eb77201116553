#include "src/server/pixel_channel_pairing.h"

namespace heterodl {

bool PixelChannelPairing::Accepted(Connection connection, absl::Time now) {
  if (waiting_.size() >= static_cast<size_t>(limits_.max_unpaired)) {
    return false;
  }
  waiting_[connection] = {now + limits_.attach_timeout, std::nullopt};
  return true;
}

PixelChannelPairing::Verdict PixelChannelPairing::Presented(Connection connection,
                                                            const PixelTicket& ticket,
                                                            absl::Time now) {
  if (auto claimed = claimed_.find(ticket); claimed != claimed_.end()) {
    ChannelEntry& channel = channels_[claimed->second];
    if (channel.attached) {
      return {Verdict::Action::kClose};  // a second connection of the ticket
    }
    channel.attached = true;
    waiting_.erase(connection);
    return {Verdict::Action::kAttach, claimed->second};
  }
  auto [it, inserted] = presented_.emplace(ticket, connection);
  if (!inserted && it->second != connection) {
    return {Verdict::Action::kClose};  // the ticket is another's
  }
  WaitingConnection& waiting = waiting_[connection];
  waiting.ticket = ticket;
  waiting.deadline = now + limits_.attach_timeout;
  return {Verdict::Action::kWait};
}

absl::StatusOr<PixelChannelPairing::Claimed> PixelChannelPairing::Claim(const PixelTicket& ticket,
                                                                        absl::Time now) {
  if (claimed_.count(ticket) > 0) {
    return absl::AlreadyExistsError("pixel channel ticket claimed twice");
  }
  Claimed claimed;
  claimed.channel = next_channel_++;
  ChannelEntry& channel = channels_[claimed.channel];
  channel.ticket = ticket;
  channel.deadline = now + limits_.attach_timeout;
  claimed_[ticket] = claimed.channel;
  if (auto presented = presented_.find(ticket); presented != presented_.end()) {
    claimed.attach = presented->second;
    waiting_.erase(presented->second);
    presented_.erase(presented);
    channel.attached = true;
  }
  return claimed;
}

void PixelChannelPairing::ConnectionClosed(Connection connection) {
  auto it = waiting_.find(connection);
  if (it == waiting_.end()) {
    return;
  }
  if (it->second.ticket) {
    if (auto presented = presented_.find(*it->second.ticket);
        presented != presented_.end() && presented->second == connection) {
      presented_.erase(presented);
    }
  }
  waiting_.erase(it);
}

void PixelChannelPairing::ChannelEnded(Channel channel) {
  auto it = channels_.find(channel);
  if (it == channels_.end()) {
    return;
  }
  claimed_.erase(it->second.ticket);
  channels_.erase(it);
}

PixelChannelPairing::Expired PixelChannelPairing::Tick(absl::Time now) {
  Expired expired;
  for (const auto& [connection, waiting] : waiting_) {
    if (now > waiting.deadline) {
      expired.connections.push_back(connection);
    }
  }
  for (const Connection connection : expired.connections) {
    ConnectionClosed(connection);
  }
  for (const auto& [id, channel] : channels_) {
    if (!channel.attached && now > channel.deadline) {
      expired.channels.push_back(id);
    }
  }
  return expired;
}

bool PixelChannelPairing::attached(Channel channel) const {
  auto it = channels_.find(channel);
  return it != channels_.end() && it->second.attached;
}

}  // namespace heterodl
