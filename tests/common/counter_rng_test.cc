#include "src/common/counter_rng.h"

#include <set>

#include "gtest/gtest.h"

namespace heterodl {
namespace {

// Known-answer vectors of Philox4x32-10 published with Random123.
TEST(CounterRngTest, PhiloxMatchesKnownAnswers) {
  EXPECT_EQ(CounterRng::Philox({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(CounterRng::Philox({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                               {0xffffffff, 0xffffffff}),
            (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(CounterRng::Philox({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                               {0xa4093822, 0x299f31d0}),
            (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(CounterRngTest, SameKeyGivesSameSequence) {
  CounterRng a(42, {kStreamAugment, 3, 17});
  CounterRng b(42, {kStreamAugment, 3, 17});
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(a.NextU32(), b.NextU32());
  }
}

TEST(CounterRngTest, DifferentKeysDiffer) {
  CounterRng a(42, {kStreamAugment, 3, 17});
  CounterRng b(42, {kStreamAugment, 3, 18});
  CounterRng c(43, {kStreamAugment, 3, 17});
  const uint64_t first = a.NextU64();
  EXPECT_NE(first, b.NextU64());
  EXPECT_NE(first, c.NextU64());
}

TEST(CounterRngTest, BelowStaysInRangeAndCoversIt) {
  CounterRng rng(1, {0, 0, 0});
  std::set<uint64_t> seen;
  for (int i = 0; i < 2000; ++i) {
    const uint64_t value = rng.Below(7);
    ASSERT_LT(value, 7u);
    seen.insert(value);
  }
  EXPECT_EQ(seen.size(), 7u);
}

TEST(CounterRngTest, UniformStaysInRange) {
  CounterRng rng(5, {1, 2, 3});
  for (int i = 0; i < 1000; ++i) {
    const double value = rng.Uniform(0.25, 0.5);
    ASSERT_GE(value, 0.25);
    ASSERT_LT(value, 0.5);
  }
}

}  // namespace
}  // namespace heterodl
