// PixelTransport: how one stream's pixels reach the loader. A batch's
// header always comes through gRPC; its pixels come one of three ways:
//
//   - inline, in the gRPC message itself (always possible: the fallback);
//   - on a TCP pixel channel beside the stream (src/wire/pixel_channel.h),
//     recv() straight into the batch: half the CPU per byte of gRPC's path;
//   - on a same-host channel, copied out of the server's shared memory.
//
// PixelTransportSelector is the one place that chooses, per stream, from
// what the server offers and what worked before:
//
//   PixelTransportSelector selector(policy, "algo-2:50051");
//   std::unique_ptr<PixelTransport> pixels = selector.Choose(offer);  // never null
//   open.set_pixel_ticket(pixels->ticket());
//   ... RETURN_IF_ERROR(pixels->Receive(decoded, planned_bytes, pool));
//   selector.Broke(*pixels, status);  // when the stream ended in DATA_LOSS
#ifndef HETERODL_SRC_CLIENT_PIXEL_TRANSPORT_H_
#define HETERODL_SRC_CLIENT_PIXEL_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "src/common/memory/buffer_pool.h"
#include "src/wire/batch_codec.h"

namespace heterodl {

enum class PixelPath { kGrpc, kTcpChannel, kSameHost };

absl::string_view PixelPathName(PixelPath path);

class PixelTransport {
 public:
  virtual ~PixelTransport() = default;

  virtual PixelPath path() const = 0;
  // What the stream's open request carries as its pixel_ticket: the server
  // pairs its channel with the stream by it. Empty: pixels come inline.
  virtual std::string ticket() const = 0;
  // Makes `decoded` carry `planned_bytes` of pixels (what the batch's plan
  // makes, checked before this is called): inline ones are checked, a
  // channel's are read into a buffer from `pool`. DATA_LOSS when the server
  // sent another amount, or announced a channel this stream lacks;
  // UNAVAILABLE when the channel breaks or Interrupt() was called.
  virtual absl::Status Receive(DecodedBatch& decoded, uint64_t planned_bytes, BufferPool& pool) = 0;
  // Makes a blocked Receive, and every later one, fail. Any thread.
  virtual void Interrupt() = 0;
};

// The loader's wishes, constant for its life.
struct PixelTransportPolicy {
  bool pixel_channel = true;     // RemoteLoaderOptions::pixel_channel
  bool same_host_pixels = true;  // RemoteLoaderOptions::same_host_pixels
  bool tls = false;              // channels are plaintext: TLS keeps pixels in gRPC
  // How long a channel connection may take.
  absl::Duration connect_timeout = absl::Seconds(5);
  // How long a server goes without a channel after its port could not be
  // reached, or its shared memory broke the protocol.
  absl::Duration retry_after = absl::Minutes(10);
};

// What a server offers a stream (its DatasetInfo, asked just before).
struct PixelOffer {
  uint32_t pixel_port = 0;   // 0: no TCP channel
  std::string pixel_socket;  // empty: no same-host channel
};

// Chooses the transports of one connection's streams, one after another
// (not thread-safe: a connection opens one stream at a time).
class PixelTransportSelector {
 public:
  // `server_address`: the connection's gRPC target; a TCP channel is tried
  // on its host when it is host:port.
  PixelTransportSelector(PixelTransportPolicy policy, std::string server_address);

  // In order: the same-host channel, the TCP channel, gRPC. A same-host
  // socket that is not there (the server is on another host) is passed over
  // silently; an unreachable TCP port is said once (a warning), then not
  // tried again for policy.retry_after. Never null.
  std::unique_ptr<PixelTransport> Choose(const PixelOffer& offer);

  // A stream on `transport` ended with `status`. A same-host channel that
  // broke the protocol (DATA_LOSS: a region this process could not map)
  // is not used for policy.retry_after, with a warning; pixels come over
  // TCP meanwhile rather than failing every stream the same way.
  void Broke(const PixelTransport& transport, const absl::Status& status);

 private:
  const PixelTransportPolicy policy_;
  const std::string server_address_;
  absl::Time tcp_retry_after_ = absl::InfinitePast();
  absl::Time same_host_retry_after_ = absl::InfinitePast();
};

}  // namespace heterodl

#endif  // HETERODL_SRC_CLIENT_PIXEL_TRANSPORT_H_
