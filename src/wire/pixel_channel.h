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

inline constexpr size_t kPixelChannelHelloBytes = sizeof(kPixelChannelMagic) + sizeof(PixelTicket);

// 16 bytes from the kernel's random source.
PixelTicket NewPixelTicket();
// As BatchRequest.pixel_ticket carries it.
std::string PixelTicketBytes(const PixelTicket& ticket);
// nullopt unless `bytes` is exactly a ticket's length.
std::optional<PixelTicket> PixelTicketFromBytes(absl::string_view bytes);

}  // namespace heterodl

#endif  // HETERODL_SRC_WIRE_PIXEL_CHANNEL_H_
