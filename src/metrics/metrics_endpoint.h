// MetricsEndpoint: an HTTP server of one page, GET /metrics, in Prometheus's
// text format (what `render` returns at each scrape), on a thread of its
// own. It is what `serve --metrics-port` and the trainer's leader start for
// Prometheus, a ServiceMonitor or a KEDA trigger to scrape.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<MetricsEndpoint> endpoint,
//                    MetricsEndpoint::Start("0.0.0.0", 9400, [&] { return Render(); }));
//   LogInfo("metrics on port %d", endpoint->port());
//
// HTTP is cpp-httplib's (Debian's libcpp-httplib); `render` runs on its
// threads, so it must be thread-safe.
#ifndef HETERODL_SRC_METRICS_METRICS_ENDPOINT_H_
#define HETERODL_SRC_METRICS_METRICS_ENDPOINT_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}

namespace heterodl {

class MetricsEndpoint {
 public:
  using Render = std::function<std::string()>;

  // Listens on `host`:`port` (0: a free port) and serves. UNAVAILABLE
  // naming the address when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(const std::string& host, int port,
                                                                Render render);
  // Stops serving (a scrape under way finishes first) and joins the thread.
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  int port() const { return port_; }

 private:
  MetricsEndpoint(std::unique_ptr<httplib::Server> server, int port);

  std::unique_ptr<httplib::Server> server_;
  int port_;
  std::thread serving_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_METRICS_METRICS_ENDPOINT_H_
