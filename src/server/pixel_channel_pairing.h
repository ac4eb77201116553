// PixelChannelPairing: which loader connection carries which stream's
// pixels. The pixel channel port's decisions, free of sockets and of a clock
// of its own (callers pass the time): a connection is accepted, presents its
// stream's ticket in its hello (src/wire/pixel_channel.h), and is paired
// with the channel that the stream claims with the same ticket, whichever
// of the two comes first; each waits at most attach_timeout for the other,
// and at most max_unpaired connections wait at once. The listener
// (pixel_channel_listener.cc) reads the sockets and carries out what this
// answers.
//
//   PixelChannelPairing pairing({.attach_timeout = absl::Seconds(10), .max_unpaired = 1024});
//   if (!pairing.Accepted(fd, now)) close(fd);
//   PixelChannelPairing::Verdict verdict = pairing.Presented(fd, ticket, now);
//   ASSIGN_OR_RETURN(PixelChannelPairing::Claimed claimed, pairing.Claim(ticket, now));
//   PixelChannelPairing::Expired expired = pairing.Tick(now);  // to close, to break
//
// Invariants: a ticket is claimed by at most one open channel, and presented
// by at most one waiting connection; a channel has at most one connection;
// a connection is unpaired (waiting) or attached to one channel, never both.
// Not thread-safe: the listener's lock guards it.
#ifndef HETERODL_SRC_SERVER_PIXEL_CHANNEL_PAIRING_H_
#define HETERODL_SRC_SERVER_PIXEL_CHANNEL_PAIRING_H_

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/wire/pixel_channel.h"

namespace heterodl {

struct PixelPairingLimits {
  // A connection must present its ticket, a presented ticket must be
  // claimed, and a claimed ticket's connection must arrive, within this.
  absl::Duration attach_timeout = absl::Seconds(10);
  // Connections accepted and not yet paired.
  int max_unpaired = 1024;
};

class PixelChannelPairing {
 public:
  // A connection, as the listener numbers them (its socket descriptor).
  using Connection = int;
  using Channel = uint64_t;

  explicit PixelChannelPairing(PixelPairingLimits limits) : limits_(limits) {}

  // A connection was accepted: it waits for its hello. False (close it)
  // when max_unpaired connections wait already.
  bool Accepted(Connection connection, absl::Time now);

  // What to do with a connection that presented its ticket.
  struct Verdict {
    enum class Action {
      kAttach,  // its stream claimed the ticket: `channel`'s connection
      kWait,    // for the claim, until its deadline
      kClose,   // another connection has the ticket (presented or attached)
    };
    Action action = Action::kClose;
    Channel channel = 0;
  };
  Verdict Presented(Connection connection, const PixelTicket& ticket, absl::Time now);

  // A stream claimed `ticket`: its new channel, and the connection that
  // presented the ticket already, if one did (attach it now).
  // ALREADY_EXISTS when an open channel claimed it before.
  struct Claimed {
    Channel channel = 0;
    std::optional<Connection> attach;
  };
  absl::StatusOr<Claimed> Claim(const PixelTicket& ticket, absl::Time now);

  // A waiting connection went or was closed. Unknown ones are ignored.
  void ConnectionClosed(Connection connection);
  // A channel ended: its ticket may be claimed again.
  void ChannelEnded(Channel channel);

  // What passed its deadline by `now`: waiting connections to close (each
  // also leaves the table), channels whose connection never came to break
  // (each stays until ChannelEnded).
  struct Expired {
    std::vector<Connection> connections;
    std::vector<Channel> channels;
  };
  Expired Tick(absl::Time now);

  // Whether `channel`'s connection arrived.
  bool attached(Channel channel) const;
  int waiting_connections() const { return static_cast<int>(waiting_.size()); }
  int open_channels() const { return static_cast<int>(channels_.size()); }

 private:
  struct WaitingConnection {
    absl::Time deadline;
    std::optional<PixelTicket> ticket;  // once presented
  };
  struct ChannelEntry {
    PixelTicket ticket{};
    absl::Time deadline;  // for its connection to arrive
    bool attached = false;
  };

  const PixelPairingLimits limits_;
  Channel next_channel_ = 1;
  std::map<Connection, WaitingConnection> waiting_;
  std::map<PixelTicket, Connection> presented_;  // by waiting connections
  std::map<PixelTicket, Channel> claimed_;       // by open channels
  std::map<Channel, ChannelEntry> channels_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_SERVER_PIXEL_CHANNEL_PAIRING_H_
