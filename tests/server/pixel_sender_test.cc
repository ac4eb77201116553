// The two pixel senders on their own: what each writes next, and what a
// write, an ack, the loader's end or a break means. The loader's end is one
// side of a socketpair.
#include "src/server/pixel_sender.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "src/common/memory/buffer_pool.h"
#include "src/common/net/unique_fd.h"
#include "src/wire/pixel_channel.h"

namespace heterodl {
namespace {

// Pixels of `bytes` bytes, and the `sent` their callback reported (unset
// until it ran).
struct Tracked {
  std::shared_ptr<std::optional<bool>> sent = std::make_shared<std::optional<bool>>();
};

QueuedPixels Pixels(size_t bytes, const Tracked& tracked, uint8_t value = 7) {
  auto data = std::make_shared<const std::vector<uint8_t>>(bytes, value);
  return {OutgoingPixels::Share(data), [sent = tracked.sent](bool ok) { *sent = ok; }};
}

void RunCallbacks(SentCallbacks& done) {
  for (auto& [callback, sent] : done) {
    callback(sent);
  }
  done.clear();
}

// A connected pair: [0] the server's end, [1] the loader's.
struct SocketPair {
  SocketPair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    server = UniqueFd(fds[0]);
    loader = UniqueFd(fds[1]);
  }
  UniqueFd server;
  UniqueFd loader;
};

TEST(TcpPixelSenderTest, PixelsGoOutInOrderAndCountAsSentWhenWhole) {
  Tracked first;
  Tracked second;
  std::deque<QueuedPixels> waiting;
  waiting.push_back(Pixels(10, first, 1));
  std::unique_ptr<PixelSender> sender = MakeTcpPixelSender(std::move(waiting));
  sender->Queue(Pixels(4, second, 2));
  SentCallbacks done;
  ASSERT_TRUE(sender->HasWork());
  std::optional<PixelChunk> chunk = sender->Next();
  ASSERT_TRUE(chunk.has_value());
  EXPECT_EQ(chunk->size, 10u);
  EXPECT_EQ(chunk->data[0], 1);
  EXPECT_EQ(chunk->attach_fd, -1);
  sender->Wrote(6, done);  // partly
  EXPECT_TRUE(done.empty());
  EXPECT_EQ(sender->Next()->size, 4u);
  sender->Wrote(4, done);
  ASSERT_EQ(done.size(), 1u);
  RunCallbacks(done);
  EXPECT_EQ(*first.sent, true);
  chunk = sender->Next();
  EXPECT_EQ(chunk->data[0], 2);
  // The channel breaks before the second is written: it fails.
  EXPECT_FALSE(sender->Break(done, /*loader_gone=*/false));
  RunCallbacks(done);
  EXPECT_EQ(*second.sent, false);
  EXPECT_FALSE(sender->HasWork());
}

TEST(TcpPixelSenderTest, BytesFromTheLoaderAreAProtocolErrorAndItsEndClosesTheChannel) {
  std::unique_ptr<PixelSender> sender = MakeTcpPixelSender({});
  SentCallbacks done;
  SocketPair quiet;
  EXPECT_FALSE(sender->ReadFromLoader(quiet.server.get(), done).closed);
  SocketPair talking;
  ASSERT_EQ(::write(talking.loader.get(), "x", 1), 1);
  const LoaderEnd talked = sender->ReadFromLoader(talking.server.get(), done);
  EXPECT_TRUE(talked.closed);
  EXPECT_NE(talked.why.find("sent bytes on its pixel channel"), std::string::npos);
  SocketPair gone;
  gone.loader = UniqueFd();
  const LoaderEnd ended = sender->ReadFromLoader(gone.server.get(), done);
  EXPECT_TRUE(ended.closed);
  EXPECT_EQ(ended.why, "");
}

PixelRecord RecordOf(const PixelChunk& chunk) {
  PixelRecord record;
  EXPECT_EQ(chunk.size, sizeof(record));
  std::memcpy(&record, chunk.data, sizeof(record));
  return record;
}

// A same-host sender with one batch of `bytes` queued, its pixels in the
// server's shared memory.
class SameHostPixelSenderTest : public ::testing::Test {
 protected:
  void QueueSharedBatch(size_t bytes) {
    absl::StatusOr<PooledBuffer> buffer = pool_->Get(bytes);
    ASSERT_TRUE(buffer.ok());
    span_ = regions_->Find(buffer->data(), buffer->size());
    if (!span_) {
      GTEST_SKIP() << "no memfd here: every batch goes inline";
    }
    sender_ = MakeSameHostPixelSender({}, regions_);
    sender_->Queue(
        {OutgoingPixels::Own(*std::move(buffer)), [sent = tracked_.sent](bool ok) { *sent = ok; }});
  }

  std::shared_ptr<SharedRegions> regions_ = SharedRegions::Create();
  std::shared_ptr<BufferPool> pool_ = BufferPool::Create(4, regions_->allocator());
  std::optional<SharedSpan> span_;
  Tracked tracked_;
  std::unique_ptr<PixelSender> sender_;
};

TEST_F(SameHostPixelSenderTest, SharedPixelsArePointedAtAndSentOnceAcked) {
  QueueSharedBatch(64);
  if (IsSkipped()) {
    return;
  }
  PixelSender* sender = sender_.get();
  const std::optional<SharedSpan>& span = span_;
  Tracked& tracked = tracked_;
  SentCallbacks done;
  std::optional<PixelChunk> chunk = sender->Next();
  ASSERT_TRUE(chunk.has_value());
  EXPECT_EQ(chunk->attach_fd, span->fd);  // the region's memfd, with its first record
  const PixelRecord record = RecordOf(*chunk);
  EXPECT_EQ(record.kind, PixelRecordKind::kShared);
  EXPECT_EQ(record.region, span->region);
  EXPECT_EQ(record.bytes, 64u);
  sender->Wrote(sizeof(PixelRecord), done);
  EXPECT_FALSE(sender->HasWork());
  EXPECT_TRUE(done.empty());  // not sent until the loader copied it
  SocketPair pair;
  ASSERT_EQ(::write(pair.loader.get(), &kPixelAck, 1), 1);
  EXPECT_FALSE(sender->ReadFromLoader(pair.server.get(), done).closed);
  RunCallbacks(done);
  EXPECT_EQ(*tracked.sent, true);
  // An ack for nothing is a protocol error.
  ASSERT_EQ(::write(pair.loader.get(), &kPixelAck, 1), 1);
  const LoaderEnd extra = sender->ReadFromLoader(pair.server.get(), done);
  EXPECT_TRUE(extra.closed);
  EXPECT_NE(extra.why.find("more than its acks"), std::string::npos);
  // Its region freed: the loader is told to forget it, once.
  sender->RegionFreed(span->region);
  sender->RegionFreed(span->region);
  chunk = sender->Next();
  ASSERT_TRUE(chunk.has_value());
  EXPECT_EQ(RecordOf(*chunk).kind, PixelRecordKind::kForget);
  sender->Wrote(sizeof(PixelRecord), done);
  EXPECT_FALSE(sender->HasWork());
}

TEST_F(SameHostPixelSenderTest, AnUnackedBatchLingersUnlessTheLoaderIsGone) {
  QueueSharedBatch(16);
  if (IsSkipped()) {
    return;
  }
  PixelSender* sender = sender_.get();
  Tracked& tracked = tracked_;
  SentCallbacks done;
  ASSERT_TRUE(sender->Next().has_value());
  sender->Wrote(sizeof(PixelRecord), done);
  EXPECT_TRUE(sender->Break(done, /*loader_gone=*/false));  // kept while it may copy
  EXPECT_TRUE(done.empty());
  EXPECT_FALSE(sender->Break(done, /*loader_gone=*/true));  // its end closed: released
  RunCallbacks(done);
  EXPECT_EQ(*tracked.sent, false);
}

TEST_F(SameHostPixelSenderTest, PixelsOutsideSharedMemoryGoInlineAfterTheirRecord) {
  Tracked tracked;
  std::deque<QueuedPixels> waiting;
  waiting.push_back(Pixels(5, tracked, 9));
  std::unique_ptr<PixelSender> sender = MakeSameHostPixelSender(std::move(waiting), nullptr);
  SentCallbacks done;
  std::optional<PixelChunk> chunk = sender->Next();
  ASSERT_TRUE(chunk.has_value());
  EXPECT_EQ(chunk->attach_fd, -1);
  const PixelRecord record = RecordOf(*chunk);
  EXPECT_EQ(record.kind, PixelRecordKind::kInline);
  EXPECT_EQ(record.bytes, 5u);
  sender->Wrote(10, done);  // part of the record
  EXPECT_EQ(sender->Next()->size, sizeof(PixelRecord) - 10);
  sender->Wrote(sizeof(PixelRecord) - 10, done);
  chunk = sender->Next();
  ASSERT_EQ(chunk->size, 5u);
  EXPECT_EQ(chunk->data[0], 9);
  sender->Wrote(5, done);
  RunCallbacks(done);
  EXPECT_EQ(*tracked.sent, true);
}

}  // namespace
}  // namespace heterodl
