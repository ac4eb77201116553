// What the pixel channel's tests share: both ends are real, and each test
// checks one end's behaviour (tests/server/pixel_channel_listener_test.cc,
// tests/client/pixel_channel_reader_test.cc) or the protocol between them
// (tests/wire/pixel_channel_test.cc). Where one end must misbehave, a raw
// socket stands in for it.
//
//   SendLog log;   // before the listener: its callbacks write here
//   ASSERT_OK_AND_ASSIGN(auto listener, ListenOnLoopback());
//   ASSERT_OK_AND_ASSIGN(auto reader, ConnectOverTcp(*listener, ticket));
//   channel->Send(OutgoingPixels::Share(Pattern(1 << 20, 1)), log.Expect(1));
//   EXPECT_EQ(log.Await(1), (std::vector<std::pair<int, bool>>{{1, true}}));
#ifndef HETERODL_TESTS_TESTING_PIXEL_CHANNEL_TESTING_H_
#define HETERODL_TESTS_TESTING_PIXEL_CHANNEL_TESTING_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "src/client/pixel_channel_reader.h"
#include "src/common/memory/buffer_pool.h"
#include "src/common/memory/shared_regions.h"
#include "src/server/pixel_channel_listener.h"
#include "src/wire/pixel_channel.h"

namespace heterodl {

// `bytes` bytes of a pattern that differs with `seed` and along the buffer.
std::shared_ptr<const std::vector<uint8_t>> Pattern(size_t bytes, uint8_t seed);

// Collects the callbacks of one test's sends. Declare it before the
// listener: callbacks run on the listener's thread until the listener is
// gone.
class SendLog {
 public:
  PixelChannel::SentCallback Expect(int id);
  // Waits (up to 20 s) for `count` callbacks; all of them so far, in the
  // order they ran.
  std::vector<std::pair<int, bool>> Await(size_t count) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex mu_;
  std::vector<std::pair<int, bool>> results_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<PixelChannelListener>> ListenOnLoopback(
    PixelChannelLimits limits = {});
absl::StatusOr<std::unique_ptr<PixelChannelReader>> ConnectOverTcp(
    const PixelChannelListener& listener, const PixelTicket& ticket);

// A plain TCP connection to the listener on `port`, for what a loader would
// never send.
int RawConnection(int port);
// True when the server closed `fd` within a few seconds.
bool ClosedByServer(int fd);

// A same-host connection made by hand, its hello sent: what
// PixelChannelReader::ConnectLocal does. -1 when it cannot connect.
int RawLocalConnection(const std::string& name, const PixelTicket& ticket);
// One record off a raw same-host connection; the descriptor that came with
// it, or -1.
int ReadRecord(int fd, PixelRecord& record);

// Same host: batches built in shared regions, the loader on the listener's
// Unix socket.
class SameHostChannelTest : public ::testing::Test {
 protected:
  void SetUp() override;
  // A batch buffer of the server's pool holding Pattern(bytes, seed).
  OutgoingPixels Batch(size_t bytes, uint8_t seed);
  absl::StatusOr<std::unique_ptr<PixelChannelReader>> ConnectLocal(const PixelTicket& ticket);
  // The process's mappings of pixel regions: the server's and the loader's
  // (both in this process).
  static int MappedRegions();

  // Declared first: callbacks run on the listener's thread until the
  // listener is gone, so the log they write to must outlive it.
  SendLog log_;
  std::shared_ptr<SharedRegions> regions_ = SharedRegions::Create();
  // max_free 0: every buffer is freed once sent, so its region is forgotten.
  std::shared_ptr<BufferPool> pool_ = BufferPool::Create(0, regions_->allocator());
  std::unique_ptr<PixelChannelListener> listener_;
};

}  // namespace heterodl

#endif  // HETERODL_TESTS_TESTING_PIXEL_CHANNEL_TESTING_H_
