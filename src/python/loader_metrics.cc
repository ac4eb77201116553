#include "src/python/loader_metrics.h"

#include <utility>

#include "src/common/status_macros.h"

namespace heterodl {

absl::StatusOr<std::unique_ptr<LoaderMetrics>> LoaderMetrics::Start(
    int port, const RemoteLoaderOptions& options) {
  std::unique_ptr<LoaderMetrics> metrics(new LoaderMetrics(options));
  ASSIGN_OR_RETURN(metrics->endpoint_,
                   MetricsEndpoint::Start("0.0.0.0", port, [metrics = metrics.get()] {
                     return metrics->feed_.Render(metrics->watch_.capacity(), HETERODL_VERSION);
                   }));
  return metrics;
}

void LoaderMetrics::Taken(absl::Time asked, absl::Time returned, const Batch& batch) {
  const absl::Time step_start = last_taken_.value_or(asked);
  last_taken_ = returned;
  feed_.RecordStep({absl::ToDoubleSeconds(returned - step_start),
                    absl::ToDoubleSeconds(returned - asked), static_cast<uint32_t>(batch.size()),
                    static_cast<uint32_t>(batch.failed)});
}

}  // namespace heterodl
