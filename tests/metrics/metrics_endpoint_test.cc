#include "src/metrics/metrics_endpoint.h"

#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "boost/asio/connect.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "gtest/gtest.h"
#include "src/common/net/unique_fd.h"

namespace heterodl {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;

// One request on a connection of its own, answered within `timeout`
// (Beast's client; an error or a timeout is the response's absence).
struct Got {
  bool answered = false;
  int status = 0;
  std::string body;
  std::string content_type;
};
Got Fetch(int port, const std::string& target, absl::Duration timeout = absl::Seconds(10),
          http::verb method = http::verb::get) {
  boost::asio::io_context io;
  beast::tcp_stream stream(io);
  stream.expires_after(absl::ToChronoNanoseconds(timeout));
  beast::error_code error;
  stream.connect(
      tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)),
      error);
  Got got;
  if (error) {
    return got;
  }
  http::request<http::empty_body> request(method, target, 11);
  request.set(http::field::host, "127.0.0.1");
  request.keep_alive(false);
  http::async_write(stream, request, [](beast::error_code, size_t) {});
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.skip(method == http::verb::head);  // a HEAD answer's length has no body
  http::async_read(stream, buffer, parser, [&](beast::error_code read, size_t) {
    if (!read) {
      const http::response<http::string_body>& response = parser.get();
      got.answered = true;
      got.status = static_cast<int>(response.result_int());
      got.body = response.body();
      got.content_type = std::string(response[http::field::content_type]);
    }
  });
  io.run();  // the stream's deadline ends it, answered or not
  return got;
}

// A plain TCP connection to the endpoint that sends `bytes` (may be none)
// and then holds on.
UniqueFd Hold(int port, const std::string& bytes) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    return UniqueFd();
  }
  if (!bytes.empty() && send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL) < 0) {
    return UniqueFd();
  }
  return fd;
}

TEST(MetricsEndpointTest, ServesWhatRenderReturnsAtEachScrape) {
  std::atomic<int> scrapes{0};
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> endpoint = MetricsEndpoint::Start(
      "127.0.0.1", 0, [&] { return "scrapes " + std::to_string(scrapes.fetch_add(1) + 1) + "\n"; });
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const int port = (*endpoint)->port();
  ASSERT_GT(port, 0);
  for (int i = 1; i <= 2; ++i) {
    const Got got = Fetch(port, "/metrics");
    ASSERT_TRUE(got.answered);
    EXPECT_EQ(got.status, 200);
    EXPECT_EQ(got.body, "scrapes " + std::to_string(i) + "\n");
    EXPECT_EQ(got.content_type, "text/plain; version=0.0.4; charset=utf-8");
  }
  EXPECT_EQ(Fetch(port, "/metrics?name[]=x").status, 200);
  EXPECT_EQ(Fetch(port, "/other").status, 404);
  EXPECT_EQ(Fetch(port, "/metrics", absl::Seconds(10), http::verb::post).status, 405);
  const Got head = Fetch(port, "/metrics", absl::Seconds(10), http::verb::head);
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.body.empty());
}

TEST(MetricsEndpointTest, APortInUseIsRefusedNamingIt) {
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> first =
      MetricsEndpoint::Start("127.0.0.1", 0, [] { return std::string(); });
  ASSERT_TRUE(first.ok()) << first.status();
  const int port = (*first)->port();
  const absl::StatusOr<std::unique_ptr<MetricsEndpoint>> second =
      MetricsEndpoint::Start("127.0.0.1", port, [] { return std::string(); });
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsUnavailable(second.status()));
  EXPECT_NE(second.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << second.status();
  EXPECT_TRUE(absl::IsUnavailable(
      MetricsEndpoint::Start("no such host.invalid", 0, [] { return std::string(); }).status()));
}

TEST(MetricsEndpointTest, StopsAtOnceEvenWhenNeverScrapedOrWhileConnectionsAreHeld) {
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<std::unique_ptr<MetricsEndpoint>> endpoint =
        MetricsEndpoint::Start("127.0.0.1", 0, [] { return std::string(); });
    ASSERT_TRUE(endpoint.ok()) << endpoint.status();
    const UniqueFd held = Hold((*endpoint)->port(), i % 2 == 0 ? "GET /met" : "");
  }  // each destructor stops and joins
}

TEST(MetricsEndpointTest, AnswersAScrapeWhileAThousandConnectionsHangOnIt) {
  // The test process holds both ends of every connection.
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);
  ASSERT_GE(files.rlim_cur, 2500u) << "too few descriptors for the test";
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> endpoint =
      MetricsEndpoint::Start("127.0.0.1", 0, [] { return std::string("up 1\n"); });
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const int port = (*endpoint)->port();
  // A slowloris: half the connections send nothing, half a request's first
  // line and one header, and all of them wait.
  std::vector<UniqueFd> held;
  for (int i = 0; i < 1000; ++i) {
    held.push_back(Hold(port, i % 2 == 0 ? "" : "GET /metrics HTTP/1.1\r\nHost: x\r\n"));
    ASSERT_TRUE(held.back().valid()) << i;
  }
  for (int scrape = 0; scrape < 3; ++scrape) {
    const absl::Time start = absl::Now();
    const Got got = Fetch(port, "/metrics", absl::Seconds(5));
    const absl::Duration took = absl::Now() - start;
    ASSERT_TRUE(got.answered) << "no answer within 5 s with 1000 connections held";
    EXPECT_EQ(got.status, 200);
    EXPECT_EQ(got.body, "up 1\n");
    std::fprintf(stderr, "scrape %d answered in %s with 1000 connections held\n", scrape,
                 absl::FormatDuration(took).c_str());
  }
}

TEST(MetricsEndpointTest, AnOversizedHeaderOrBodyIsRefusedNotRead) {
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> endpoint =
      MetricsEndpoint::Start("127.0.0.1", 0, [] { return std::string("up 1\n"); });
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const int port = (*endpoint)->port();
  const auto answer = [&](const std::string& request) {
    const UniqueFd fd = Hold(port, request);
    std::string reply;
    char chunk[4096];
    timeval timeout{5, 0};
    setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    while (true) {
      const ssize_t got = recv(fd.get(), chunk, sizeof(chunk), 0);
      if (got <= 0) {
        break;
      }
      reply.append(chunk, static_cast<size_t>(got));
    }
    return reply.substr(0, reply.find("\r\n"));
  };
  // A 1 MB header: refused once it passes the limit (the rest unread).
  EXPECT_EQ(answer(absl::StrCat("GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: ",
                                std::string(1 << 20, 'a'), "\r\n\r\n")),
            "HTTP/1.1 431 Request Header Fields Too Large");
  EXPECT_EQ(answer(absl::StrCat("POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n"
                                "\r\n",
                                std::string(100000, 'b'))),
            "HTTP/1.1 413 Payload Too Large");
  EXPECT_EQ(answer("NOT HTTP AT ALL\r\n\r\n"), "HTTP/1.1 400 Bad Request");
  // And the endpoint serves on.
  EXPECT_EQ(Fetch(port, "/metrics").status, 200);
}

}  // namespace
}  // namespace heterodl
