#include "src/common/memory/shared_regions.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/status_testing.h"

namespace heterodl {
namespace {

TEST(SharedRegionsTest, APoolsBuffersAreSealedRegionsAnotherMappingSees) {
  std::shared_ptr<SharedRegions> regions = SharedRegions::Create();
  auto pool = BufferPool::Create(/*max_free=*/0, regions->allocator());
  ASSERT_OK_AND_ASSIGN(PooledBuffer buffer, pool->Get(1 << 20));
  for (size_t i = 0; i < buffer.size(); ++i) {
    buffer.data()[i] = static_cast<uint8_t>(i * 7);
  }

  const std::optional<SharedSpan> span = regions->Find(buffer.data() + 100, 1000);
  ASSERT_TRUE(span.has_value());
  EXPECT_EQ(span->offset, 100u);
  EXPECT_GE(span->region_bytes, 1u << 20);
  // Past the region's end, or memory that is not a region: not found.
  EXPECT_FALSE(regions->Find(buffer.data() + 100, span->region_bytes).has_value());
  std::vector<uint8_t> heap(64);
  EXPECT_FALSE(regions->Find(heap.data(), heap.size()).has_value());

  // What a same-host loader does with the descriptor it is sent.
  const int seals = fcntl(span->fd, F_GET_SEALS);
  EXPECT_TRUE(seals & F_SEAL_SHRINK);
  EXPECT_TRUE(seals & F_SEAL_GROW);
  EXPECT_NE(ftruncate(span->fd, 10), 0) << "a sealed region cannot shrink under a mapping";
  ASSERT_OK_AND_ASSIGN(MappedRegion mapped, MapSharedRegion(dup(span->fd), 1 << 20));
  EXPECT_EQ(std::memcmp(mapped.data + 100, buffer.data() + 100, 1000), 0);
  buffer.data()[5000] ^= 0xff;  // writes show through: the same pages
  EXPECT_EQ(mapped.data[5000], buffer.data()[5000]);
  UnmapSharedRegion(mapped);
}

TEST(SharedRegionsTest, FreeingARegionTellsTheListenerItsId) {
  std::shared_ptr<SharedRegions> regions = SharedRegions::Create();
  std::vector<uint64_t> freed;
  regions->SetReleaseListener([&freed](uint64_t region) { freed.push_back(region); });
  // max_free 1: the second released buffer is freed, the first kept.
  auto pool = BufferPool::Create(/*max_free=*/1, regions->allocator());
  ASSERT_OK_AND_ASSIGN(PooledBuffer a, pool->Get(4096));
  ASSERT_OK_AND_ASSIGN(PooledBuffer b, pool->Get(4096));
  const uint64_t a_id = regions->Find(a.data(), 1)->region;
  const uint64_t b_id = regions->Find(b.data(), 1)->region;
  EXPECT_NE(a_id, b_id);
  EXPECT_EQ(regions->live(), 2u);
  a.Reset();
  EXPECT_TRUE(freed.empty());
  b.Reset();
  EXPECT_EQ(freed, std::vector<uint64_t>{b_id});
  EXPECT_EQ(regions->live(), 1u);
  // A new region never reuses an id.
  ASSERT_OK_AND_ASSIGN(PooledBuffer c, pool->Get(4096));
  ASSERT_OK_AND_ASSIGN(PooledBuffer d, pool->Get(4096));
  EXPECT_NE(regions->Find(d.data(), 1)->region, b_id);
  regions->SetReleaseListener({});
}

TEST(SharedRegionsTest, OnlySealedRegionsLargeEnoughAreMapped) {
  const int unsealed = memfd_create("test", MFD_CLOEXEC);
  ASSERT_GE(unsealed, 0);
  ASSERT_EQ(ftruncate(unsealed, 4096), 0);
  absl::StatusOr<MappedRegion> refused = MapSharedRegion(unsealed, 4096);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("not sealed"), std::string::npos);

  std::shared_ptr<SharedRegions> regions = SharedRegions::Create();
  auto pool = BufferPool::Create(1, regions->allocator());
  ASSERT_OK_AND_ASSIGN(PooledBuffer buffer, pool->Get(4096));
  const std::optional<SharedSpan> span = regions->Find(buffer.data(), 1);
  absl::StatusOr<MappedRegion> small = MapSharedRegion(dup(span->fd), 1 << 20);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("fewer than"), std::string::npos);
}

// With files limited to 64 KiB, a 1 MiB memfd cannot be sized: the
// allocation comes from the heap (the batch is still built), and Find() does
// not claim it. (Not by running out of descriptors: the sanitizers need
// some.)
void AllocateWhereMemfdsCannotBeSized() {
  std::signal(SIGXFSZ, SIG_IGN);  // else the truncate kills the process
  rlimit limit{64 << 10, 64 << 10};
  if (setrlimit(RLIMIT_FSIZE, &limit) != 0) {
    std::exit(2);
  }
  std::shared_ptr<SharedRegions> regions = SharedRegions::Create();
  auto pool = BufferPool::Create(1, regions->allocator());
  absl::StatusOr<PooledBuffer> buffer = pool->Get(1 << 20);
  if (!buffer.ok()) {
    std::exit(3);
  }
  std::memset(buffer->data(), 7, buffer->size());
  if (regions->Find(buffer->data(), 1).has_value()) {
    std::exit(4);
  }
  if (regions->live() != 0) {
    std::exit(5);
  }
  std::exit(0);
}

TEST(SharedRegionsTest, WhereMemfdsFailBuffersComeFromTheHeap) {
  EXPECT_EXIT(AllocateWhereMemfdsCannotBeSized(), ::testing::ExitedWithCode(0),
              "shared pixel memory: .* through the socket instead");
}

}  // namespace
}  // namespace heterodl
