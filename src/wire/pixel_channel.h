// Pixel channel: a plain TCP connection beside one StreamBatches call that
// carries the pixels of its batches, so that neither end copies them in user
// space. This header is the protocol; the server's end is
// pixel_channel_listener.h, the loader's pixel_channel_reader.h.
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
// Same host. A server whose batches live in shared memory
// (src/common/memory/shared_regions.h) also listens on an abstract Unix
// socket, DatasetInfo.pixel_socket: a random name, reachable only from the
// server's network namespace, so a loader that can connect is on its host.
// Over TCP loopback a batch is copied into the kernel and out again, and the
// TCP stack runs for every 64 KiB: a tenth of a 2-core machine at 3,000
// images/s (docs/benchmarks.md). On the Unix socket the loader sends the same
// hello; then, for every batch, the server writes a PixelRecord instead of
// the pixels:
// - kShared: the pixels are `bytes` bytes at `offset` in region `region`.
//   The record that first names a region carries its memfd (SCM_RIGHTS).
//   The loader maps it once, copies the pixels out and writes one
//   kPixelAck byte; only then may the server reuse the memory;
// - kInline: `bytes` bytes of pixels follow on the socket (pixels that do not
//   live in a region, such as a synthetic dataset's);
// - kForget: region `region` was freed; the loader unmaps it.
// Records are in the host's byte order: both ends share the host.
//
// Anything else. A TCP connection that does not open with the magic (a gRPC
// client or a person given the pixel port by mistake) is sent one line of
// text, PixelPortNotice(service port), and closed: a loader that cannot
// speak gRPC to an address probes it (src/client/endpoint_probe.h) and says
// which port to use instead of waiting for a server that is not there.
#ifndef HETERODL_SRC_WIRE_PIXEL_CHANNEL_H_
#define HETERODL_SRC_WIRE_PIXEL_CHANNEL_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace heterodl {

// What a connection writes first: protocol and version, then its ticket.
inline constexpr char kPixelChannelMagic[4] = {'H', 'D', 'P', '1'};

using PixelTicket = std::array<uint8_t, 16>;

enum class PixelRecordKind : uint32_t { kInline = 1, kShared = 2, kForget = 3 };

struct PixelRecord {
  PixelRecordKind kind = PixelRecordKind::kInline;
  uint32_t reserved = 0;
  uint64_t region = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};
static_assert(sizeof(PixelRecord) == 32, "a record is 32 bytes on the wire");

// What a same-host loader writes after copying a kShared record's pixels.
inline constexpr uint8_t kPixelAck = 1;

inline constexpr size_t kPixelChannelHelloBytes = sizeof(kPixelChannelMagic) + sizeof(PixelTicket);

// The line a pixel port writes to a connection that is not a pixel
// channel's: "heterodl pixel channel port; the data service is on port N\n"
// (N 0 when the listener does not know it yet).
std::string PixelPortNotice(int service_port);
// The service port named by a reply that starts with PixelPortNotice's
// text; nullopt for any other reply.
std::optional<int> ServicePortFromNotice(absl::string_view reply);

// 16 bytes from the kernel's random source.
PixelTicket NewPixelTicket();
// As BatchRequest.pixel_ticket carries it.
std::string PixelTicketBytes(const PixelTicket& ticket);
// nullopt unless `bytes` is exactly a ticket's length.
std::optional<PixelTicket> PixelTicketFromBytes(absl::string_view bytes);

}  // namespace heterodl

#endif  // HETERODL_SRC_WIRE_PIXEL_CHANNEL_H_
