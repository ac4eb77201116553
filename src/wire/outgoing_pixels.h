// OutgoingPixels: a batch's pixels on their way out of a data server, and
// what keeps them alive until sent: a pooled batch buffer, or a pre-built
// batch shared by many sends. Both senders take them without a copy: gRPC
// (src/wire/batch_codec.h) and the pixel channel (src/wire/pixel_channel.h).
//
//   OutgoingPixels pixels = OutgoingPixels::Own(std::move(buffer));
//   channel->Send(std::move(pixels), on_sent);
#ifndef HETERODL_SRC_WIRE_OUTGOING_PIXELS_H_
#define HETERODL_SRC_WIRE_OUTGOING_PIXELS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "src/common/memory/buffer_pool.h"

namespace heterodl {

struct OutgoingPixels {
  std::shared_ptr<const void> owner;
  const uint8_t* data = nullptr;
  size_t size = 0;

  // Takes the buffer; it goes back to its pool once the last send is done.
  static OutgoingPixels Own(PooledBuffer buffer) {
    auto owned = std::make_shared<PooledBuffer>(std::move(buffer));
    return {owned, owned->data(), owned->size()};
  }
  // Shares bytes sent many times (a synthetic dataset's batch).
  static OutgoingPixels Share(std::shared_ptr<const std::vector<uint8_t>> bytes) {
    const uint8_t* data = bytes->data();
    const size_t size = bytes->size();
    return {std::move(bytes), data, size};
  }
};

}  // namespace heterodl

#endif  // HETERODL_SRC_WIRE_OUTGOING_PIXELS_H_
