// Pixel channel: a plain TCP connection beside one StreamBatches call that
// carries the pixels of its batches, so that neither end copies them in user
// space.
//
// Through gRPC a received batch is a chain of ~64 KiB slices of gRPC's own
// buffers, and the loader must copy it into one contiguous tensor: half of
// the loader's CPU per byte (docs/benchmarks.md). On a pixel channel the
// server's send() reads straight from the batch buffer and the loader's recv()
// writes straight into the destination (pinned on a CUDA trainer). The stream
// still carries everything else: requests, batch headers, status, errors.
//
// Protocol. The loader connects to the server's pixel port
// (DatasetInfo.pixel_port) and writes kPixelChannelMagic and a fresh random
// ticket; then it opens StreamBatches with the same ticket in its open
// request. The server pairs connection and stream by ticket, whichever comes
// first. From then on, for every batch header on the stream that carries
// `images_on_channel = n`, the server writes exactly n bytes on the channel,
// in the order of the headers. Nothing else flows; either end closing the
// connection ends the stream.
//
// The ticket travels inside the (authenticated) gRPC call, so a channel is as
// authorized as its stream. It is plaintext: loaders do not use it under TLS.
//
// Server:
//   ASSIGN_OR_RETURN(auto listener, PixelChannelListener::Listen("0.0.0.0", 0));
//   info.set_pixel_port(listener->port());
//   ASSIGN_OR_RETURN(std::shared_ptr<PixelChannel> channel, listener->Claim(ticket));
//   channel->Send(OutgoingPixels::Own(std::move(buffer)), [](bool sent) {...});
// Loader:
//   const PixelTicket ticket = NewPixelTicket();
//   ASSIGN_OR_RETURN(auto reader, PixelChannelReader::Connect(host, port, ticket, timeout));
//   (open the stream with the ticket)
//   RETURN_IF_ERROR(reader->ReadExactly(tensor_data, header.images_on_channel()));
#ifndef HETERODL_SRC_WIRE_PIXEL_CHANNEL_H_
#define HETERODL_SRC_WIRE_PIXEL_CHANNEL_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "src/wire/outgoing_pixels.h"

namespace heterodl {

// What a connection writes first: protocol and version.
inline constexpr char kPixelChannelMagic[4] = {'H', 'D', 'P', '1'};

using PixelTicket = std::array<uint8_t, 16>;

// 16 bytes from the kernel's random source.
PixelTicket NewPixelTicket();
// As BatchRequest.pixel_ticket carries it.
std::string PixelTicketBytes(const PixelTicket& ticket);
// nullopt unless `bytes` is exactly a ticket's length.
std::optional<PixelTicket> PixelTicketFromBytes(absl::string_view bytes);

// The server end of one channel. Thread-safe.
class PixelChannel {
 public:
  // Runs once per Send, on the listener's thread and never inside Send or
  // Close (callers may hold their own locks there): `sent` is true once the
  // kernel has taken every byte, false when the channel broke or was closed
  // first.
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
  // Connections not yet paired with a stream; more are closed at once, so
  // a port scanner cannot pile them up.
  int max_unpaired = 1024;
};

// Accepts loaders' connections on one port and pairs them with streams. One
// thread (epoll) does all the channels' writes: a core copies several GB/s
// into socket buffers, more than a data server's NIC carries.
class PixelChannelListener {
 public:
  // Binds `host` (a name or address; "0.0.0.0" or "::" for all) and `port`
  // (0: any free port). UNAVAILABLE naming the address when it cannot.
  static absl::StatusOr<std::unique_ptr<PixelChannelListener>> Listen(
      const std::string& host, int port, PixelChannelLimits limits = {});
  // Closes every channel; callbacks still owed run before it returns.
  virtual ~PixelChannelListener() = default;

  virtual int port() const = 0;
  // The channel of `ticket`, whose connection may have arrived or not yet.
  // ALREADY_EXISTS when the ticket was claimed before.
  virtual absl::StatusOr<std::shared_ptr<PixelChannel>> Claim(const PixelTicket& ticket) = 0;
};

// The loader's end of a channel: a connected socket it reads pixels from.
class PixelChannelReader {
 public:
  // Connects and presents `ticket`. UNAVAILABLE (or DEADLINE_EXCEEDED after
  // `timeout`) naming host and port.
  static absl::StatusOr<std::unique_ptr<PixelChannelReader>> Connect(const std::string& host,
                                                                     int port,
                                                                     const PixelTicket& ticket,
                                                                     absl::Duration timeout);
  ~PixelChannelReader();
  PixelChannelReader(const PixelChannelReader&) = delete;
  PixelChannelReader& operator=(const PixelChannelReader&) = delete;

  // Reads exactly `size` bytes into `destination`. UNAVAILABLE when the
  // connection ends or breaks first, or Interrupt() was called.
  absl::Status ReadExactly(uint8_t* destination, size_t size);
  // Makes a blocked ReadExactly, and every later one, fail. Any thread.
  void Interrupt();

 private:
  explicit PixelChannelReader(int fd) : fd_(fd) {}

  const int fd_;
  std::atomic<bool> interrupted_{false};
};

}  // namespace heterodl

#endif  // HETERODL_SRC_WIRE_PIXEL_CHANNEL_H_
