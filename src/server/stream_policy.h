// StreamPolicy: what a data server allows its batch streams (how many, from
// where, holding how much), set from serve's flags (DataServerOptions) and
// kept by the stream reactors (src/server/batch_stream_reactor.h).
#ifndef HETERODL_SRC_SERVER_STREAM_POLICY_H_
#define HETERODL_SRC_SERVER_STREAM_POLICY_H_

#include <cstdint>

#include "absl/time/time.h"

namespace heterodl {

// What the server allows its stream calls.
struct StreamPolicy {
  // Streams open at once, over all clients (serve --max-streams).
  // A call holds a slot from its open request on.
  int max_streams = 256;
  // Calls that have not sent their open request yet: they hold no stream
  // slot, and end after open_timeout. Past this many, the oldest of them end
  // to make room (a flood of bare calls cannot keep a loader's out, whose
  // open follows its call at once); past twice this many, new ones are
  // refused.
  int max_unopened_calls = 1024;
  absl::Duration open_timeout = absl::Seconds(5);
  // Bytes of batches one stream may have asked and not received.
  uint64_t max_stream_bytes = 2ull << 30;
  // Streams one host may hold open (DataServerOptions: 0 is half of
  // max_streams).
  int max_streams_per_host = 128;
  // A stream whose built batches have waited this long with nothing read
  // is ended while other streams wait for the server's memory budget: a
  // client that asks and never reads cannot hold the memory others need.
  // (Its loader, if it is one, asks again elsewhere; nothing is lost.)
  absl::Duration unread_timeout = absl::Seconds(30);
};

}  // namespace heterodl

#endif  // HETERODL_SRC_SERVER_STREAM_POLICY_H_
