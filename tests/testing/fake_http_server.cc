#include "tests/testing/fake_http_server.h"

#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/write.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "src/common/status_macros.h"

namespace heterodl {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

class FakeHttpServer::Impl {
 public:
  explicit Impl(Handler handler) : handler_(std::move(handler)), acceptor_(io_) {}
  ~Impl() { Stop(); }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  absl::Status Listen() {
    beast::error_code error;
    const tcp::endpoint loopback(asio::ip::make_address("127.0.0.1"), 0);
    acceptor_.open(loopback.protocol(), error);
    if (!error) {
      acceptor_.set_option(asio::socket_base::reuse_address(true), error);
    }
    if (!error) {
      acceptor_.bind(loopback, error);
    }
    if (!error) {
      acceptor_.listen(asio::socket_base::max_listen_connections, error);
    }
    if (error) {
      return absl::UnavailableError(absl::StrCat("fake HTTP server: ", error.message()));
    }
    port_ = acceptor_.local_endpoint().port();
    Accept();
    io_thread_ = std::thread([this] { io_.run(); });
    return absl::OkStatus();
  }

  void Stop() ABSL_LOCKS_EXCLUDED(mu_) {
    if (stopping_.HasBeenNotified()) {
      return;
    }
    stopping_.Notify();
    asio::post(io_, [this] { acceptor_.close(); });
    if (io_thread_.joinable()) {
      io_thread_.join();
    }
    std::vector<std::thread> threads;
    {
      absl::MutexLock lock(&mu_);
      // Wakes the connections' threads from their blocking reads.
      for (const std::shared_ptr<tcp::socket>& socket : sockets_) {
        beast::error_code ignored;
        socket->shutdown(tcp::socket::shutdown_both, ignored);
      }
      threads.swap(threads_);
    }
    for (std::thread& thread : threads) {
      thread.join();
    }
  }

  int port() const { return port_; }
  std::vector<FakeHttpRequest> requests() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return requests_;
  }
  int connections() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(sockets_.size());
  }

 private:
  // On io_thread_: each connection goes to a thread of its own.
  void Accept() {
    acceptor_.async_accept([this](beast::error_code error, tcp::socket socket) {
      if (error) {
        return;  // closed
      }
      auto shared = std::make_shared<tcp::socket>(std::move(socket));
      absl::MutexLock lock(&mu_);
      sockets_.push_back(shared);
      threads_.emplace_back([this, shared] { Serve(*shared); });
      Accept();
    });
  }

  // Answers requests on `socket` until the client closes it, a reply cuts
  // it, or the server stops.
  void Serve(tcp::socket& socket) ABSL_LOCKS_EXCLUDED(mu_) {
    beast::flat_buffer buffer;
    while (!stopping_.HasBeenNotified()) {
      http::request<http::string_body> received;
      beast::error_code error;
      http::read(socket, buffer, received, error);
      if (error) {
        return;
      }
      FakeHttpRequest request;
      request.method = std::string(received.method_string());
      request.target = std::string(received.target());
      for (const auto& field : received) {
        request.headers[absl::AsciiStrToLower(std::string(field.name_string()))] =
            std::string(field.value());
      }
      request.body = received.body();
      {
        absl::MutexLock lock(&mu_);
        requests_.push_back(request);
      }
      const FakeHttpReply reply = handler_(request);
      if (reply.delay > absl::ZeroDuration() &&
          stopping_.WaitForNotificationWithTimeout(reply.delay)) {
        return;
      }
      http::response<http::string_body> response(static_cast<http::status>(reply.status),
                                                 received.version());
      for (const auto& [name, value] : reply.headers) {
        response.set(name, value);
      }
      response.body() = reply.body;
      response.prepare_payload();
      if (request.method == "HEAD") {
        // A HEAD's answer announces the body it does not send.
        response.content_length(reply.body.size());
        http::response_serializer<http::string_body> serializer(response);
        http::write_header(socket, serializer, error);
        continue;
      }
      if (reply.cut_after) {
        http::response_serializer<http::string_body> serializer(response);
        http::write_header(socket, serializer, error);
        asio::write(socket, asio::buffer(reply.body.data(), *reply.cut_after), error);
        socket.shutdown(tcp::socket::shutdown_both, error);
        return;
      }
      http::write(socket, response, error);
      if (error || !received.keep_alive()) {
        return;
      }
    }
  }

  const Handler handler_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  int port_ = 0;
  std::thread io_thread_;
  absl::Notification stopping_;
  mutable absl::Mutex mu_;
  std::vector<FakeHttpRequest> requests_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<tcp::socket>> sockets_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<FakeHttpServer>> FakeHttpServer::Start(Handler handler) {
  auto impl = std::make_unique<Impl>(std::move(handler));
  RETURN_IF_ERROR(impl->Listen());
  return std::unique_ptr<FakeHttpServer>(new FakeHttpServer(std::move(impl)));
}

FakeHttpServer::FakeHttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FakeHttpServer::~FakeHttpServer() = default;

std::string FakeHttpServer::url() const { return absl::StrCat("http://127.0.0.1:", port()); }
int FakeHttpServer::port() const { return impl_->port(); }
std::vector<FakeHttpRequest> FakeHttpServer::requests() const { return impl_->requests(); }
int FakeHttpServer::connections() const { return impl_->connections(); }

}  // namespace heterodl
