// The same-host pixel channel's sender (see pixel_sender.h): records that
// point into shared memory, acked by the loader once it copied the pixels.
#include <sys/socket.h>

#include <cerrno>
#include <set>

#include "src/server/pixel_sender.h"
#include "src/wire/pixel_channel.h"

namespace heterodl {
namespace {

class SameHostPixelSender final : public PixelSender {
 public:
  SameHostPixelSender(std::deque<QueuedPixels> waiting, std::shared_ptr<SharedRegions> regions)
      : regions_(std::move(regions)) {
    for (QueuedPixels& queued : waiting) {
      Queue(std::move(queued));
    }
  }

  void Queue(QueuedPixels pixels) override { queue_.push_back({std::move(pixels)}); }
  bool HasWork() const override { return !queue_.empty(); }

  std::optional<PixelChunk> Next() override {
    if (queue_.empty()) {
      return std::nullopt;
    }
    Entry& front = queue_.front();
    // Described when it reaches the front, so the loader gets a region's
    // memfd with the first record it reads that names the region.
    if (!front.record) {
      Describe(front);
    }
    if (front.record_sent < sizeof(PixelRecord)) {
      return PixelChunk{reinterpret_cast<const uint8_t*>(&*front.record) + front.record_sent,
                        sizeof(PixelRecord) - front.record_sent, front.attach_fd};
    }
    const OutgoingPixels& pixels = front.queued.pixels;
    return PixelChunk{pixels.data + front.offset, pixels.size - front.offset, -1};
  }

  void Wrote(size_t bytes, SentCallbacks& done) override {
    Entry& front = queue_.front();
    if (front.record_sent < sizeof(PixelRecord)) {
      front.record_sent += bytes;
      if (bytes > 0) {
        front.attach_fd = -1;  // it went with the first byte
      }
      if (front.record_sent < sizeof(PixelRecord)) {
        return;
      }
      if (front.record->kind == PixelRecordKind::kShared) {
        awaiting_ack_.push_back(std::move(front.queued));
        queue_.pop_front();
      } else if (front.record->kind == PixelRecordKind::kForget) {
        queue_.pop_front();
      }
      return;  // kInline: its pixels follow
    }
    front.offset += bytes;
    if (front.offset == front.queued.pixels.size) {
      done.emplace_back(std::move(front.queued.sent), true);
      queue_.pop_front();
    }
  }

  LoaderEnd ReadFromLoader(int fd, SentCallbacks& done) override {
    uint8_t acks[256];
    while (true) {
      const ssize_t n = ::recv(fd, acks, sizeof(acks), MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return {};
      }
      if (n <= 0) {
        return {true, ""};  // the loader's end is closed: it reads no more
      }
      for (ssize_t i = 0; i < n; ++i) {
        if (acks[i] != kPixelAck || awaiting_ack_.empty()) {
          return {true, "a same-host loader sent more than its acks; closed"};
        }
        done.emplace_back(std::move(awaiting_ack_.front().sent), true);
        awaiting_ack_.pop_front();
      }
    }
  }

  bool Break(SentCallbacks& done, bool loader_gone) override {
    for (Entry& entry : queue_) {
      done.emplace_back(std::move(entry.queued.sent), false);
    }
    queue_.clear();
    if (!loader_gone && !awaiting_ack_.empty()) {
      // The loader may be copying out of this memory right now.
      return true;
    }
    for (QueuedPixels& queued : awaiting_ack_) {
      done.emplace_back(std::move(queued.sent), false);
    }
    awaiting_ack_.clear();
    return false;
  }

  void RegionFreed(uint64_t region) override {
    if (regions_sent_.erase(region) == 0) {
      return;
    }
    Entry forget;
    forget.record = PixelRecord{PixelRecordKind::kForget, 0, region, 0, 0};
    queue_.push_back(std::move(forget));
  }

 private:
  struct Entry {
    QueuedPixels queued;  // empty for a kForget record
    // The record written before (or instead of) the pixels, how much of it
    // is written, and the region's memfd to pass with its first byte (-1:
    // none; owned by the region, which the pixels keep).
    std::optional<PixelRecord> record;
    size_t record_sent = 0;
    int attach_fd = -1;
    size_t offset = 0;  // of the pixels (kInline), written
  };

  // The record of `entry`'s pixels: where they lie in shared memory, or
  // inline when they are not there.
  void Describe(Entry& entry) {
    const OutgoingPixels& pixels = entry.queued.pixels;
    const std::optional<SharedSpan> span =
        regions_ == nullptr ? std::nullopt : regions_->Find(pixels.data, pixels.size);
    if (!span) {
      entry.record = PixelRecord{PixelRecordKind::kInline, 0, 0, 0, pixels.size};
      return;
    }
    entry.record =
        PixelRecord{PixelRecordKind::kShared, 0, span->region, span->offset, pixels.size};
    if (regions_sent_.insert(span->region).second) {
      entry.attach_fd = span->fd;
    }
  }

  const std::shared_ptr<SharedRegions> regions_;
  std::deque<Entry> queue_;
  // Pixels the loader was pointed at and has not yet acked, in order.
  std::deque<QueuedPixels> awaiting_ack_;
  // The regions whose memfd the loader has.
  std::set<uint64_t> regions_sent_;
};

}  // namespace

std::unique_ptr<PixelSender> MakeSameHostPixelSender(std::deque<QueuedPixels> waiting,
                                                     std::shared_ptr<SharedRegions> regions) {
  return std::make_unique<SameHostPixelSender>(std::move(waiting), std::move(regions));
}

}  // namespace heterodl
