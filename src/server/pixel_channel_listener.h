// PixelChannelListener: the server's end of pixel channels (the protocol:
// src/wire/pixel_channel.h). Accepts loaders' connections on one port, pairs
// each with its stream by ticket, and writes the stream's pixels to it.
//
//   ASSIGN_OR_RETURN(auto listener, PixelChannelListener::Listen("0.0.0.0", 0));
//   info.set_pixel_port(listener->port());
//   ASSIGN_OR_RETURN(std::shared_ptr<PixelChannel> channel, listener->Claim(ticket));
//   channel->Send(OutgoingPixels::Own(std::move(buffer)), [](bool sent) {...});
#ifndef HETERODL_SRC_SERVER_PIXEL_CHANNEL_LISTENER_H_
#define HETERODL_SRC_SERVER_PIXEL_CHANNEL_LISTENER_H_

#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/common/memory/shared_regions.h"
#include "src/wire/outgoing_pixels.h"
#include "src/wire/pixel_channel.h"

namespace heterodl {

// The server end of one channel. Thread-safe.
class PixelChannel {
 public:
  // Runs once per Send, on the listener's thread and never inside Send or
  // Close (callers may hold their own locks there): `sent` is true once the
  // kernel has taken every byte (on a same-host channel, once the loader has
  // copied the pixels out of shared memory), false when the channel broke or
  // was closed first. Until then the pixels are kept alive.
  using SentCallback = absl::AnyInvocable<void(bool sent)>;

  virtual ~PixelChannel() = default;
  // Queues the pixels behind those queued before; they stay alive until
  // written. Pixels sent before the loader's connection arrives wait for it
  // (up to the listener's attach timeout, then the channel breaks).
  virtual void Send(OutgoingPixels pixels, SentCallback sent) = 0;
  // Ends the channel: queued pixels are dropped (their callbacks get false)
  // and the connection is closed.
  virtual void Close() = 0;
};

struct PixelChannelLimits {
  // A connection must present its ticket, a presented ticket must be
  // claimed, and a claimed ticket's connection must arrive, within this.
  absl::Duration attach_timeout = absl::Seconds(10);
  // A same-host channel the server ends while its loader may still be
  // copying pixels keeps them until the loader closes its end, or this long.
  absl::Duration linger_timeout = absl::Seconds(60);
  // Connections not yet paired with a stream; more are closed at once, so
  // a port scanner cannot pile them up.
  int max_unpaired = 1024;
};

// One thread (epoll) does all the channels' writes: a core copies several
// GB/s into socket buffers, more than a data server's NIC carries.
class PixelChannelListener {
 public:
  // Binds `host` (a name or address; "0.0.0.0" or "::" for all) and `port`
  // (0: any free port). UNAVAILABLE naming the address when it cannot.
  // With `shared_regions` (where the server builds its batches), it also
  // listens for same-host loaders on an abstract Unix socket, and sends them
  // the pixels that lie in those regions as places to copy from.
  static absl::StatusOr<std::unique_ptr<PixelChannelListener>> Listen(
      const std::string& host, int port, PixelChannelLimits limits = {},
      std::shared_ptr<SharedRegions> shared_regions = nullptr);
  // Closes every channel; callbacks still owed run before it returns.
  virtual ~PixelChannelListener() = default;

  virtual int port() const = 0;
  // The data service's port, named in the line the pixel port writes to a
  // connection that is not a pixel channel's (pixel_channel.h), so that a
  // client given the wrong port learns the right one. Thread-safe.
  virtual void SetServicePort(int service_port) = 0;
  // The abstract Unix socket's name (without its leading NUL); empty when
  // there is none.
  virtual std::string local_socket() const = 0;
  // The channel of `ticket`, whose connection may have arrived or not yet.
  // ALREADY_EXISTS when the ticket was claimed before.
  virtual absl::StatusOr<std::shared_ptr<PixelChannel>> Claim(const PixelTicket& ticket) = 0;
  // Returns once the listener's thread has run a whole turn begun after the
  // call: what was sent, closed or connected before it has been acted on,
  // and the callbacks it owed have run. (How a test waits on the listener
  // rather than on a clock.)
  virtual void AwaitTurn() = 0;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_SERVER_PIXEL_CHANNEL_LISTENER_H_
