// LoaderMetrics: the Prometheus endpoint of a Python RemoteDataLoader
// (`metrics_port=`), for training loops heterodl does not run: the steps as
// the loader sees them (the time between the batches the loop takes, and how
// much of it the loop waited in next()), the samples it delivered, and the
// data group's capacity, as `train --metrics-port` serves them
// (src/metrics/feed_metrics.h).
//
//   ASSIGN_OR_RETURN(auto metrics, LoaderMetrics::Start(9401, loader_options));
//   const absl::Time asked = absl::Now();
//   batch = loader->Next();
//   metrics->Taken(asked, absl::Now(), batch);
#ifndef HETERODL_SRC_PYTHON_LOADER_METRICS_H_
#define HETERODL_SRC_PYTHON_LOADER_METRICS_H_

#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/client/batch.h"
#include "src/client/data_group_watch.h"
#include "src/client/remote_loader.h"
#include "src/metrics/feed_metrics.h"
#include "src/metrics/metrics_endpoint.h"

namespace heterodl {

class LoaderMetrics {
 public:
  // Serves http://0.0.0.0:`port`/metrics (0: any free port) for the loader
  // made with `options`, whose servers it polls for their capacity.
  // UNAVAILABLE when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<LoaderMetrics>> Start(int port,
                                                              const RemoteLoaderOptions& options);

  // A next() that was called at `asked` returned `batch` at `returned`: one
  // step, from the batch taken before it (or from `asked`, the first of an
  // iteration) to this one, its wait the time next() took.
  void Taken(absl::Time asked, absl::Time returned, const Batch& batch);
  // An iteration starts: the time since the last batch of the one before
  // (an evaluation, a checkpoint) is no step.
  void IterationStarted() { last_taken_.reset(); }

  int port() const { return endpoint_->port(); }

 private:
  explicit LoaderMetrics(const RemoteLoaderOptions& options)
      : feed_("loader", static_cast<int>(options.world_size)),
        watch_(options.servers, options.auth_token, options.tls) {}

  FeedMetrics feed_;
  DataGroupWatch watch_;
  // Reads the two above on its own thread: declared after them.
  std::unique_ptr<MetricsEndpoint> endpoint_;
  // Only the thread holding the GIL touches it.
  std::optional<absl::Time> last_taken_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_PYTHON_LOADER_METRICS_H_
