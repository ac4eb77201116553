#include "src/common/counter_rng.h"

namespace heterodl {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;
constexpr uint32_t kWeyl1 = 0xBB67AE85u;

inline void MulHiLo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  uint64_t product = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(product >> 32);
  *lo = static_cast<uint32_t>(product);
}

}  // namespace

std::array<uint32_t, 4> CounterRng::Philox(std::array<uint32_t, 4> counter,
                                           std::array<uint32_t, 2> key) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    MulHiLo(kMul0, counter[0], &hi0, &lo0);
    MulHiLo(kMul1, counter[2], &hi1, &lo1);
    counter = {hi1 ^ counter[1] ^ key[0], lo1, hi0 ^ counter[3] ^ key[1], lo0};
    key[0] += kWeyl0;
    key[1] += kWeyl1;
  }
  return counter;
}

CounterRng::CounterRng(uint64_t seed, std::array<uint32_t, 3> counter)
    : key_{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)},
      counter_{counter[0], counter[1], counter[2], 0} {}

void CounterRng::Refill() {
  block_ = Philox(counter_, key_);
  ++counter_[3];
  used_ = 0;
}

uint32_t CounterRng::NextU32() {
  if (used_ == 4) {
    Refill();
  }
  return block_[used_++];
}

uint64_t CounterRng::NextU64() {
  uint64_t high = NextU32();
  return (high << 32) | NextU32();
}

double CounterRng::NextDouble() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

double CounterRng::Uniform(double low, double high) { return low + (high - low) * NextDouble(); }

uint64_t CounterRng::Below(uint64_t bound) {
  // Reject the top partial range so every residue is equally likely.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t value;
  do {
    value = NextU64();
  } while (value >= limit);
  return value % bound;
}

}  // namespace heterodl
