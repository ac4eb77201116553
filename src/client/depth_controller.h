// DepthController: how many batches one stream keeps requested from its
// server, sized from what the stream measures.
//
// A server builds a stream's batches one after another, each with all of its
// threads (src/server/sample_pool.h). Its threads stay busy while, at every
// moment, it has the batch it builds and the next one queued. On top of those
// two come the batches in transit: requests on their way to the server, and
// built batches on the wire or waiting to be read. The loader times each
// batch's round trip, and the server reports how long the batch waited in its
// queue and how long it took to build; the rest of the round trip is transit,
// and transit / build is how many batches are in transit at once. So
//
//   depth = 2 + ceil(1.5 x transit / build)   within [min_depth, max_depth]
//
// (1.5: headroom for jitter). Queueing time is left out on purpose: it grows
// with the depth itself (Little's law), and a controller that counted it
// would only ever grow. The result does not depend on the server's core
// count: more cores build each batch faster, and the same depth keeps them
// busy. Slow networks and fast servers raise it; the memory budget
// (max_depth, and the loader's window) bounds it.
//
//   DepthController depth;
//   depth.Observe(round_trip, header.queue_seconds, header.build_seconds);
//   while (outstanding < depth.depth()) RequestOneMore();
//
// Not thread-safe: the loader calls it under its own lock.
#ifndef HETERODL_SRC_CLIENT_DEPTH_CONTROLLER_H_
#define HETERODL_SRC_CLIENT_DEPTH_CONTROLLER_H_

#include "absl/time/time.h"

namespace heterodl {

struct DepthLimits {
  int min_depth = 2;
  int max_depth = 64;
  // Before the first measurement.
  int initial_depth = 4;
};

class DepthController {
 public:
  explicit DepthController(DepthLimits limits = {});

  // One batch: from its request to its arrival, and what its server reported.
  // Values that cannot be (negative, or server times longer than the round
  // trip) are clipped, never trusted to grow the depth past max_depth.
  void Observe(absl::Duration round_trip, absl::Duration queued, absl::Duration built);
  // Lowers or raises the ceiling (the server's per-stream limit, the memory
  // budget); clamps `max_depth` to at least min_depth.
  void SetMaxDepth(int max_depth);

  int depth() const;
  // The smoothed estimates behind depth(), for stats.
  absl::Duration transit() const { return transit_; }
  absl::Duration build() const { return build_; }
  bool measured() const { return measured_; }

 private:
  DepthLimits limits_;
  bool measured_ = false;
  absl::Duration transit_ = absl::ZeroDuration();
  absl::Duration build_ = absl::ZeroDuration();
};

}  // namespace heterodl

#endif  // HETERODL_SRC_CLIENT_DEPTH_CONTROLLER_H_
