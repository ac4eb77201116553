// The Prometheus metrics of a data server (`serve --metrics-port`): its
// counters and gauges from the statistics GetStats answers, under
// conventional names and units (docs/operations.md, "Monitoring").
//
//   endpoint = MetricsEndpoint::Start(host, port, [server] {
//     return RenderServerMetrics(server->Stats(), HETERODL_VERSION);
//   });
#ifndef HETERODL_SRC_METRICS_SERVER_METRICS_H_
#define HETERODL_SRC_METRICS_SERVER_METRICS_H_

#include <string>

#include "heterodl/data_service.pb.h"

namespace heterodl {

// The text exposition of `stats`: heterodl_samples_total{status="ok",
// "replaced", "failed"} (failed: zero-filled, or left out of a collated
// batch), heterodl_batches_total, heterodl_server_capacity_samples_per_second
// (BuildCapacity: what its threads would build never idle), recent rate,
// stage seconds, streams, memory, refusals, and heterodl_build_info{version,
// role="data"}.
std::string RenderServerMetrics(const v1::ServerStats& stats, const std::string& version);

}  // namespace heterodl

#endif  // HETERODL_SRC_METRICS_SERVER_METRICS_H_
