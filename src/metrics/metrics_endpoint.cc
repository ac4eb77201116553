#include "src/metrics/metrics_endpoint.h"

#include <chrono>
#include <list>
#include <optional>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/post.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"

namespace heterodl {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// How long a closing connection's last bytes are read (Linger).
constexpr absl::Duration kLinger = absl::Seconds(1);

// The text format's content type, version 0.0.4.
constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";

std::chrono::steady_clock::duration ToChrono(absl::Duration duration) {
  return absl::ToChronoNanoseconds(duration);
}

// A request the parser refused as malformed (as opposed to one cut short:
// the client went, or was too slow).
bool Malformed(const beast::error_code& error) {
  return error.category() == http::make_error_code(http::error::bad_method).category() &&
         error != http::error::end_of_stream && error != http::error::partial_message;
}

}  // namespace

// The endpoint's Asio side. Every member below the thread is touched only on
// the thread that runs io_ (after Listen(), which runs before it starts).
class MetricsEndpoint::Server {
 public:
  explicit Server(Render render) : render_(std::move(render)), acceptor_(io_) {}
  ~Server() { Stop(); }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and listens on the calling thread; UNAVAILABLE naming the address.
  absl::Status Listen(const std::string& host, int port);
  // Serves on a thread of its own until Stop().
  void Run();
  // Closes the listener and every connection, and joins the thread.
  void Stop();
  int port() const { return port_; }

 private:
  struct Connection;
  using Connections = std::list<std::shared_ptr<Connection>>;

  void Accept();
  // A new connection: listed last, the oldest waiting one closed when over
  // kMaxConnections.
  void Admit(tcp::socket socket);
  void Read(const std::shared_ptr<Connection>& connection);
  void Answer(const std::shared_ptr<Connection>& connection, http::status status, std::string body,
              const char* content_type, bool keep_alive);
  void Close(const std::shared_ptr<Connection>& connection);
  // After the last answer: stops sending, and reads (and drops) what the
  // client still sends for a moment before closing, so a refused request's
  // unread bytes do not turn the close into a reset that loses the answer.
  void Linger(const std::shared_ptr<Connection>& connection);
  // What a complete request gets.
  void Serve(const std::shared_ptr<Connection>& connection);

  const Render render_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  int port_ = 0;
  std::thread thread_;
  // The io_ thread's: oldest activity first.
  Connections connections_;
  bool stopping_ = false;
};

struct MetricsEndpoint::Server::Connection {
  explicit Connection(tcp::socket socket) : stream(std::move(socket)) {}

  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  std::optional<http::request_parser<http::string_body>> parser;
  http::response<http::string_body> response;
  // Waiting for (the rest of) a request, as opposed to answering one: what
  // may be closed to make room.
  bool waiting = true;
  // Requests answered on it so far.
  int answered = 0;
  bool listed = false;
  Connections::iterator position;
};

absl::Status MetricsEndpoint::Server::Listen(const std::string& host, int port) {
  const auto unavailable = [&](const beast::error_code& error) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for metrics on ", host, ":", port, " (", error.message(), ")"));
  };
  beast::error_code error;
  asio::ip::address address = asio::ip::make_address(host, error);
  if (error) {
    tcp::resolver resolver(io_);
    const tcp::resolver::results_type found = resolver.resolve(host, "", error);
    if (error || found.empty()) {
      return unavailable(error);
    }
    address = found.begin()->endpoint().address();
  }
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(port));
  acceptor_.open(endpoint.protocol(), error);
  // SO_REUSEADDR alone: with SO_REUSEPORT a second server on a port in use
  // would bind as well and take half its scrapes.
  if (!error) {
    acceptor_.set_option(asio::socket_base::reuse_address(true), error);
  }
  if (!error) {
    acceptor_.bind(endpoint, error);
  }
  if (!error) {
    acceptor_.listen(asio::socket_base::max_listen_connections, error);
  }
  if (error) {
    return unavailable(error);
  }
  port_ = acceptor_.local_endpoint().port();
  return absl::OkStatus();
}

void MetricsEndpoint::Server::Run() {
  Accept();
  thread_ = std::thread([this] { io_.run(); });
}

void MetricsEndpoint::Server::Stop() {
  if (!thread_.joinable()) {
    return;
  }
  asio::post(io_, [this] {
    stopping_ = true;
    beast::error_code ignored;
    acceptor_.close(ignored);
    while (!connections_.empty()) {
      Close(connections_.front());
    }
    io_.stop();
  });
  thread_.join();
}

void MetricsEndpoint::Server::Accept() {
  acceptor_.async_accept([this](const beast::error_code& error, tcp::socket socket) {
    if (stopping_) {
      return;
    }
    if (!error) {
      Admit(std::move(socket));
    }
    // After EMFILE and the like too: the next accept may succeed once a
    // connection closes.
    Accept();
  });
}

void MetricsEndpoint::Server::Admit(tcp::socket socket) {
  if (static_cast<int>(connections_.size()) >= kMaxConnections) {
    // The oldest one still waiting for its request: a slowloris's, or an
    // idle keep-alive connection its client will open again.
    for (const std::shared_ptr<Connection>& connection : connections_) {
      if (connection->waiting) {
        Close(connection);
        break;
      }
    }
  }
  auto connection = std::make_shared<Connection>(std::move(socket));
  connection->position = connections_.insert(connections_.end(), connection);
  connection->listed = true;
  Read(connection);
}

void MetricsEndpoint::Server::Read(const std::shared_ptr<Connection>& connection) {
  connection->waiting = true;
  connection->parser.emplace();
  connection->parser->header_limit(static_cast<uint32_t>(kMaxHeaderBytes));
  connection->parser->body_limit(kMaxBodyBytes);
  connection->stream.expires_after(
      ToChrono(connection->answered == 0 ? kHeaderTimeout : kIdleTimeout));
  http::async_read(connection->stream, connection->buffer, *connection->parser,
                   [this, connection](const beast::error_code& error, size_t /*bytes*/) {
                     if (stopping_ || !connection->listed) {
                       return;
                     }
                     if (error == http::error::header_limit) {
                       Answer(connection, http::status::request_header_fields_too_large,
                              absl::StrCat("request header over ", kMaxHeaderBytes, " bytes\n"),
                              "text/plain", false);
                     } else if (error == http::error::body_limit) {
                       Answer(connection, http::status::payload_too_large,
                              absl::StrCat("request body over ", kMaxBodyBytes, " bytes\n"),
                              "text/plain", false);
                     } else if (Malformed(error)) {
                       Answer(connection, http::status::bad_request, "malformed request\n",
                              "text/plain", false);
                     } else if (error) {
                       Close(connection);  // gone, reset, or too slow
                     } else {
                       Serve(connection);
                     }
                   });
}

void MetricsEndpoint::Server::Serve(const std::shared_ptr<Connection>& connection) {
  const http::request<http::string_body>& request = connection->parser->get();
  const bool keep_alive = request.keep_alive();
  if (request.method() != http::verb::get && request.method() != http::verb::head) {
    Answer(connection, http::status::method_not_allowed, "GET /metrics\n", "text/plain", false);
    return;
  }
  const beast::string_view target = request.target();
  const beast::string_view path = target.substr(0, target.find('?'));
  if (path == "/metrics") {
    Answer(connection, http::status::ok, render_(), kContentType, keep_alive);
  } else if (path == "/") {
    Answer(connection, http::status::ok, "heterodl: metrics at /metrics\n", "text/plain",
           keep_alive);
  } else {
    Answer(connection, http::status::not_found, "not found: metrics are at /metrics\n",
           "text/plain", keep_alive);
  }
}

void MetricsEndpoint::Server::Answer(const std::shared_ptr<Connection>& connection,
                                     http::status status, std::string body,
                                     const char* content_type, bool keep_alive) {
  connection->waiting = false;
  // The most recently active: the last to be closed for room.
  connections_.splice(connections_.end(), connections_, connection->position);
  const bool head = connection->parser && connection->parser->is_header_done() &&
                    connection->parser->get().method() == http::verb::head;
  http::response<http::string_body>& response = connection->response;
  response = {};
  response.result(status);
  response.version(11);
  response.set(http::field::server, "heterodl");
  response.set(http::field::content_type, content_type);
  response.keep_alive(keep_alive);
  response.content_length(body.size());
  if (!head) {
    response.body() = std::move(body);
  }
  connection->stream.expires_after(ToChrono(kWriteTimeout));
  http::async_write(connection->stream, response,
                    [this, connection, keep_alive](const beast::error_code& error, size_t) {
                      if (stopping_ || !connection->listed) {
                        return;
                      }
                      ++connection->answered;
                      if (error) {
                        Close(connection);
                      } else if (!keep_alive) {
                        Linger(connection);
                      } else {
                        Read(connection);
                      }
                    });
}

void MetricsEndpoint::Server::Linger(const std::shared_ptr<Connection>& connection) {
  connection->waiting = true;  // first to go when room is needed
  beast::error_code ignored;
  connection->stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  connection->stream.expires_after(ToChrono(kLinger));
  connection->buffer.clear();
  connection->stream.async_read_some(
      connection->buffer.prepare(64 << 10),
      [this, connection](const beast::error_code& error, size_t /*bytes*/) {
        if (stopping_ || !connection->listed) {
          return;
        }
        if (error) {
          Close(connection);
        } else {
          Linger(connection);
        }
      });
}

void MetricsEndpoint::Server::Close(const std::shared_ptr<Connection>& connection) {
  if (!connection->listed) {
    return;
  }
  connection->listed = false;
  beast::error_code ignored;
  connection->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  connection->stream.close();
  connections_.erase(connection->position);
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const std::string& host,
                                                                        int port, Render render) {
  auto server = std::make_unique<Server>(std::move(render));
  if (absl::Status listening = server->Listen(host, port); !listening.ok()) {
    return listening;
  }
  server->Run();
  return std::unique_ptr<MetricsEndpoint>(new MetricsEndpoint(std::move(server)));
}

MetricsEndpoint::MetricsEndpoint(std::unique_ptr<Server> server) : server_(std::move(server)) {}

MetricsEndpoint::~MetricsEndpoint() { server_->Stop(); }

int MetricsEndpoint::port() const { return server_->port(); }

}  // namespace heterodl
