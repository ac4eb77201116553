// Batch: what the remote loader hands a trainer, and BatchKey, which batch of
// the rank's sequence of epochs it is.
#ifndef HETERODL_SRC_CLIENT_BATCH_H_
#define HETERODL_SRC_CLIENT_BATCH_H_

#include <cstdint>
#include <tuple>
#include <vector>

#include "src/common/memory/buffer_pool.h"

namespace heterodl {

// One batch: images uint8 [size, height, width, channels] (NHWC, RGB).
struct Batch {
  uint32_t epoch = 0;
  int64_t index = 0;  // k within the rank's epoch
  int height = 0;
  int width = 0;
  int channels = 0;
  // size * height * width * channels bytes; returned to the loader's pool
  // when the Batch is destroyed (it may outlive the loader).
  PooledBuffer images;
  std::vector<int64_t> labels;
  std::vector<int64_t> indices;  // planned dataset indices
  int failed = 0;                // slots filled by replacements
  // Slots decoded around damaged data (kept; data_service.proto's
  // Batch.decoded_with_warnings).
  int decoded_with_warnings = 0;
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
};

// Batch `index` of `epoch` (of the loader's rank). Ordered as a trainer
// consumes them: by epoch, then index.
struct BatchKey {
  uint32_t epoch = 0;
  int64_t index = 0;

  friend bool operator<(const BatchKey& a, const BatchKey& b) {
    return std::tie(a.epoch, a.index) < std::tie(b.epoch, b.index);
  }
  friend bool operator==(const BatchKey& a, const BatchKey& b) {
    return a.epoch == b.epoch && a.index == b.index;
  }
  friend bool operator!=(const BatchKey& a, const BatchKey& b) { return !(a == b); }
  friend bool operator<=(const BatchKey& a, const BatchKey& b) { return !(b < a); }
};

}  // namespace heterodl

#endif  // HETERODL_SRC_CLIENT_BATCH_H_
