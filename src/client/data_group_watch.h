// DataGroupWatch: the dnn group leader's running view of the data group's
// capacity, for the scaling signal in its metrics (docs/operations.md,
// "Sizing the data group while it runs"). A background thread asks every
// data server for its statistics (what `heterodl status` shows) now and
// then, so no training step ever waits on it. The servers are those listed at
// each round (src/client/server_discovery.h): data hosts come and go.
//
//   DataGroupWatch watch({servers, servers_file, servers_dns}, token, tls);
//   if (std::optional<DataGroupCapacity> c = watch.capacity()) Use(c->per_host);
#ifndef HETERODL_SRC_CLIENT_DATA_GROUP_WATCH_H_
#define HETERODL_SRC_CLIENT_DATA_GROUP_WATCH_H_

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/client/data_group_capacity.h"
#include "src/client/server_discovery.h"
#include "src/common/net/tls_config.h"

namespace heterodl {

class DataGroupWatch {
 public:
  // Polls the listed servers every `soon` until each has built something (a
  // server that has not cannot be measured), then every `interval`; a server
  // that does not answer within 2 s is left out of that round.
  DataGroupWatch(ServerSources servers, std::string auth_token, TlsConfig tls,
                 absl::Duration soon = absl::Milliseconds(500),
                 absl::Duration interval = absl::Seconds(10));
  // Stops polling (at once, or after the round under way).
  ~DataGroupWatch();
  DataGroupWatch(const DataGroupWatch&) = delete;
  DataGroupWatch& operator=(const DataGroupWatch&) = delete;

  // The last round's figures; nullopt until a round found a server that has
  // built something.
  std::optional<DataGroupCapacity> capacity() const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until `rounds` rounds have completed since the watch started, or
  // `timeout` passed; false on the timeout. (What was measured by then is
  // capacity(): a test's way to wait on the watch, not on a clock.)
  bool AwaitRounds(int64_t rounds, absl::Duration timeout) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run(absl::Duration soon, absl::Duration interval) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits up to `duration`; false when stopping.
  bool Sleep(absl::Duration duration) ABSL_LOCKS_EXCLUDED(mu_);

  ServerDiscovery servers_;  // only the polling thread uses it
  const std::string auth_token_;
  const TlsConfig tls_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<DataGroupCapacity> capacity_ ABSL_GUARDED_BY(mu_);
  int64_t rounds_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace heterodl

#endif  // HETERODL_SRC_CLIENT_DATA_GROUP_WATCH_H_
