// MetricsEndpoint: an HTTP server of one page, GET /metrics, in Prometheus's
// text format (what `render` returns at each scrape). It is what `serve
// --metrics-port`, the trainer's leader and the Python loader start for
// Prometheus, a ServiceMonitor or a KEDA trigger to scrape.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<MetricsEndpoint> endpoint,
//                    MetricsEndpoint::Start("0.0.0.0", 9400, [&] { return Render(); }));
//   LogInfo("metrics on port %d", endpoint->port());
//
// An autoscaler scales the data group on this page, so no client may blind
// it: connections are served by one thread with non-blocking I/O (Boost.
// Beast over Asio, header-only from Debian's libboost-dev), never a thread
// per connection, so idle and half-sent requests (a slowloris) cost a
// socket each and delay no one. Each connection must send its request's
// header within kHeaderTimeout and at most kMaxHeaderBytes of it (431
// otherwise), a request has no body over kMaxBodyBytes (413), and past
// kMaxConnections open connections the oldest one still waiting for its
// request is closed to make room, so a scrape always gets in. `render`
// runs on the endpoint's thread, so it must be thread-safe and quick.
#ifndef HETERODL_SRC_METRICS_METRICS_ENDPOINT_H_
#define HETERODL_SRC_METRICS_METRICS_ENDPOINT_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace heterodl {

class MetricsEndpoint {
 public:
  using Render = std::function<std::string()>;

  // What one connection may take of the server.
  static constexpr size_t kMaxHeaderBytes = 8 << 10;
  static constexpr size_t kMaxBodyBytes = 4 << 10;
  static constexpr absl::Duration kHeaderTimeout = absl::Seconds(10);
  // Between two requests on one connection (Prometheus keeps its open
  // between scrapes, 15 to 60 s apart).
  static constexpr absl::Duration kIdleTimeout = absl::Seconds(90);
  static constexpr absl::Duration kWriteTimeout = absl::Seconds(30);
  static constexpr int kMaxConnections = 256;

  // Listens on `host`:`port` (0: a free port) and serves. UNAVAILABLE
  // naming the address when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(const std::string& host, int port,
                                                                Render render);
  // Stops serving (closing every connection) and joins the thread.
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  int port() const;

  class Server;  // the Asio side, in the .cc

 private:
  explicit MetricsEndpoint(std::unique_ptr<Server> server);

  std::unique_ptr<Server> server_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_METRICS_METRICS_ENDPOINT_H_
