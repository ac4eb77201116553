// The TCP pixel channel's sender (see pixel_sender.h): pixels only.
#include <sys/socket.h>

#include <cerrno>

#include "src/server/pixel_sender.h"

namespace heterodl {
namespace {

class TcpPixelSender final : public PixelSender {
 public:
  explicit TcpPixelSender(std::deque<QueuedPixels> waiting) : queue_(std::move(waiting)) {}

  void Queue(QueuedPixels pixels) override { queue_.push_back(std::move(pixels)); }
  bool HasWork() const override { return !queue_.empty(); }

  std::optional<PixelChunk> Next() override {
    if (queue_.empty()) {
      return std::nullopt;
    }
    const OutgoingPixels& pixels = queue_.front().pixels;
    return PixelChunk{pixels.data + offset_, pixels.size - offset_, -1};
  }

  void Wrote(size_t bytes, SentCallbacks& done) override {
    offset_ += bytes;
    if (offset_ == queue_.front().pixels.size) {
      done.emplace_back(std::move(queue_.front().sent), true);
      queue_.pop_front();
      offset_ = 0;
    }
  }

  // A loader sends nothing after its hello: this is its end of the
  // connection, as when it cancels the stream (which says why, if anything
  // went wrong), or a protocol error.
  LoaderEnd ReadFromLoader(int fd, SentCallbacks& /*done*/) override {
    uint8_t byte;
    const ssize_t n = ::recv(fd, &byte, 1, MSG_DONTWAIT);
    if (n > 0) {
      return {true, "a loader sent bytes on its pixel channel; closed"};
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      return {true, ""};
    }
    return {};
  }

  bool Break(SentCallbacks& done, bool /*loader_gone*/) override {
    for (QueuedPixels& queued : queue_) {
      done.emplace_back(std::move(queued.sent), false);
    }
    queue_.clear();
    return false;  // the kernel has its own copy of what was written
  }

  void RegionFreed(uint64_t /*region*/) override {}

 private:
  std::deque<QueuedPixels> queue_;
  // Of the front batch's pixels, written.
  size_t offset_ = 0;
};

}  // namespace

std::unique_ptr<PixelSender> MakeTcpPixelSender(std::deque<QueuedPixels> waiting) {
  return std::make_unique<TcpPixelSender>(std::move(waiting));
}

}  // namespace heterodl
