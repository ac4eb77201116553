// CounterRng: a counter-based random generator (Philox4x32-10).
//
// Every random decision in heterodl is keyed by *what* it is for, never by
// which thread, process or server makes it:
//
//   CounterRng rng(seed, {kStreamAugment, epoch, sample_index});
//   double scale = rng.Uniform(0.08, 1.0);
//
// The same key and stream give the same sequence on any machine, which is what
// lets any data server build any batch bit for bit the same.
#ifndef HETERODL_SRC_COMMON_COUNTER_RNG_H_
#define HETERODL_SRC_COMMON_COUNTER_RNG_H_

#include <array>
#include <cstdint>

namespace heterodl {

// Streams: the first word of a CounterRng's counter, so that different uses of
// the same (seed, epoch, index) draw independent numbers.
enum RngStream : uint32_t {
  kStreamEpochPermutation = 1,
  kStreamAugment = 2,
  kStreamReplacement = 3,
  kStreamSampleDataset = 4,
  // A block-shuffled epoch plan: its permutation of shards, and the shuffle
  // within each window of them.
  kStreamShardPermutation = 5,
  kStreamShardWindowShuffle = 6,
  // View v of a multi-view pipeline draws from stream kStreamViewAugment + v
  // (a single-view pipeline from kStreamAugment), so every view of a sample
  // is distinct and each is the same on any server.
  kStreamViewAugment = 0x10000,
};

class CounterRng {
 public:
  // `seed` is the key; `counter` names the sequence (stream, a, b, ...).
  CounterRng(uint64_t seed, std::array<uint32_t, 3> counter);

  // Uniform over all uint32 / uint64 values.
  uint32_t NextU32();
  uint64_t NextU64();
  // Uniform in [0, 1) with 53 random bits.
  double NextDouble();
  // Uniform in [low, high).
  double Uniform(double low, double high);
  // Uniform integer in [0, bound); bound > 0. Unbiased (rejection sampling).
  uint64_t Below(uint64_t bound);

  // The raw Philox4x32-10 block function, exposed for tests against the
  // published known-answer vectors.
  static std::array<uint32_t, 4> Philox(std::array<uint32_t, 4> counter,
                                        std::array<uint32_t, 2> key);

 private:
  void Refill();

  std::array<uint32_t, 2> key_;
  std::array<uint32_t, 4> counter_;  // counter_[3] counts blocks drawn
  std::array<uint32_t, 4> block_{};
  int used_ = 4;  // words of block_ already returned
};

}  // namespace heterodl

#endif  // HETERODL_SRC_COMMON_COUNTER_RNG_H_
