// PixelSender: how one pixel channel's queued pixels go on the wire, once
// its loader's connection is attached. Two kinds, chosen by where the loader
// connected:
//
//   - TCP (MakeTcpPixelSender): the pixels themselves, batch after batch; a
//     batch is sent once the kernel took its last byte.
//   - same host (MakeSameHostPixelSender): a 32-byte record per batch
//     (pixel_channel.h): where in the server's shared memory the pixels lie
//     (the region's memfd passed with the first record that names it), or
//     the pixels inline when they are not in shared memory; a batch is sent
//     once the loader acks its copy. A record tells the loader to forget a
//     region the server freed.
//
// The listener (pixel_channel_listener.cc) owns the sockets, the epoll loop
// and pairing; a sender decides what to write next and what a write, an ack
// or a break means. Not thread-safe: the listener's lock guards it, except
// the bytes a PixelChunk points at, which stay put until the listener's own
// thread calls Wrote() or Break().
#ifndef HETERODL_SRC_SERVER_PIXEL_SENDER_H_
#define HETERODL_SRC_SERVER_PIXEL_SENDER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "src/common/memory/shared_regions.h"
#include "src/server/pixel_channel_listener.h"
#include "src/wire/outgoing_pixels.h"

namespace heterodl {

// One Send's pixels and its callback.
struct QueuedPixels {
  OutgoingPixels pixels;
  PixelChannel::SentCallback sent;
};

// Callbacks owed, with their `sent`: the listener runs them outside its lock.
using SentCallbacks = std::vector<std::pair<PixelChannel::SentCallback, bool>>;

// The next bytes to write, and a descriptor to pass with the first (-1:
// none).
struct PixelChunk {
  const uint8_t* data = nullptr;
  size_t size = 0;
  int attach_fd = -1;
};

// What reading the loader's end of the connection found.
struct LoaderEnd {
  bool closed = false;  // the channel is done
  std::string why;      // with `closed`: a protocol error to log; empty: the loader closed it
};

class PixelSender {
 public:
  virtual ~PixelSender() = default;

  // Queues pixels behind those queued before.
  virtual void Queue(QueuedPixels pixels) = 0;
  // Something is queued to write.
  virtual bool HasWork() const = 0;
  // The next bytes to write; nullopt when nothing is queued.
  virtual std::optional<PixelChunk> Next() = 0;
  // `bytes` of the last Next() chunk were written (0: none, with its
  // descriptor not passed either). Callbacks of batches now sent go to
  // `done`.
  virtual void Wrote(size_t bytes, SentCallbacks& done) = 0;
  // The loader's end is readable, or closed: acks on a same-host channel,
  // nothing but its end on a TCP one.
  virtual LoaderEnd ReadFromLoader(int fd, SentCallbacks& done) = 0;
  // The channel ends. Queued pixels fail. True: pixels the loader may be
  // copying right now are kept (a same-host loader, unless `loader_gone`):
  // the sender must live until the loader closes its end, then Break(true).
  virtual bool Break(SentCallbacks& done, bool loader_gone) = 0;
  // The server freed `region`: a loader that knows it is told to forget it.
  virtual void RegionFreed(uint64_t region) = 0;
};

// `waiting`: pixels queued before the loader's connection arrived.
std::unique_ptr<PixelSender> MakeTcpPixelSender(std::deque<QueuedPixels> waiting);
// `regions`: where the server builds batches (null: every batch inline).
std::unique_ptr<PixelSender> MakeSameHostPixelSender(std::deque<QueuedPixels> waiting,
                                                     std::shared_ptr<SharedRegions> regions);

}  // namespace heterodl

#endif  // HETERODL_SRC_SERVER_PIXEL_SENDER_H_
