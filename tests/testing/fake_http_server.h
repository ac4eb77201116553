// FakeHttpServer: an HTTP/1.1 server on loopback (Boost.Beast) whose every
// answer a test writes, for the clients of object storage and of the
// credential services: what S3, STS, a container's credential endpoint or
// the EC2 instance metadata service would say, and what the network does
// wrong (a slow first byte, a connection reset mid-body).
//
//   ASSERT_OK_AND_ASSIGN(std::unique_ptr<FakeHttpServer> server,
//       FakeHttpServer::Start([](const FakeHttpRequest& request) {
//         return FakeHttpReply{.status = 200, .body = "hello"};
//       }));
//   // server->url(): "http://127.0.0.1:PORT"; server->requests(): what came
//
// Connections are kept alive; each is served on a thread of its own. The
// handler may be called from several threads at once.
#ifndef HETERODL_TESTS_TESTING_FAKE_HTTP_SERVER_H_
#define HETERODL_TESTS_TESTING_FAKE_HTTP_SERVER_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace heterodl {

struct FakeHttpRequest {
  std::string method;
  // Path and query, as sent ("/bucket/key?list-type=2").
  std::string target;
  // Names lower-cased.
  absl::flat_hash_map<std::string, std::string> headers;
  std::string body;

  std::string header(const std::string& name) const {
    auto found = headers.find(name);
    return found == headers.end() ? "" : found->second;
  }
};

struct FakeHttpReply {
  int status = 200;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // Waited before anything is sent (a slow first byte); cut short when the
  // server stops.
  absl::Duration delay = absl::ZeroDuration();
  // Set: the headers announce the whole body, this many of its bytes are
  // sent, and the connection is closed (a reset mid-body).
  std::optional<size_t> cut_after;
};

class FakeHttpServer {
 public:
  using Handler = std::function<FakeHttpReply(const FakeHttpRequest&)>;

  // Listens on an ephemeral loopback port.
  static absl::StatusOr<std::unique_ptr<FakeHttpServer>> Start(Handler handler);
  // Closes the listener and every connection, and joins their threads.
  ~FakeHttpServer();
  FakeHttpServer(const FakeHttpServer&) = delete;
  FakeHttpServer& operator=(const FakeHttpServer&) = delete;

  // "http://127.0.0.1:PORT", no trailing '/'.
  std::string url() const;
  int port() const;
  // Every request so far, in the order they arrived.
  std::vector<FakeHttpRequest> requests() const;
  // Connections accepted so far.
  int connections() const;

 private:
  class Impl;
  explicit FakeHttpServer(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace heterodl

#endif  // HETERODL_TESTS_TESTING_FAKE_HTTP_SERVER_H_
