#include "src/metrics/metrics_endpoint.h"

#include <httplib.h>
#include <sys/socket.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace heterodl {
namespace {

// The text format's content type, version 0.0.4.
constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const std::string& host,
                                                                        int port, Render render) {
  auto server = std::make_unique<httplib::Server>();
  // httplib's default also sets SO_REUSEPORT, under which a second server
  // on a port in use binds as well and takes half its scrapes.
  server->set_socket_options([](socket_t socket) {
    const int yes = 1;
    setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server->Get("/metrics", [render = std::move(render)](const httplib::Request& /*request*/,
                                                       httplib::Response& response) {
    response.set_content(render(), kContentType);
  });
  server->Get("/", [](const httplib::Request& /*request*/, httplib::Response& response) {
    response.set_content("heterodl: metrics at /metrics\n", "text/plain");
  });
  const int bound =
      port == 0 ? server->bind_to_any_port(host) : (server->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for metrics on ", host, ":", port, " (in use?)"));
  }
  return std::unique_ptr<MetricsEndpoint>(new MetricsEndpoint(std::move(server), bound));
}

MetricsEndpoint::MetricsEndpoint(std::unique_ptr<httplib::Server> server, int port)
    : server_(std::move(server)), port_(port) {
  serving_ = std::thread([this] { server_->listen_after_bind(); });
  // stop() before the loop runs would be lost, and the destructor's join
  // would wait forever: the loop is running before anyone can stop it.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!server_->is_running() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
}

MetricsEndpoint::~MetricsEndpoint() {
  server_->stop();
  serving_.join();
}

}  // namespace heterodl
