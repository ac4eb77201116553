// HttpClient: blocking HTTP(S) requests over libcurl, for object storage
// and the credential services beside it (STS, ECS/EKS container
// credentials, EC2 instance metadata).
//
//   HttpClient http({.cancelled = &stopping});
//   HttpRequest request{.url = "https://bucket.s3.us-east-1.amazonaws.com/key"};
//   request.headers.push_back("Range: bytes=0-1023");
//   request.aws_sigv4 = {"aws:amz:us-east-1:s3", access_key, secret_key};
//   ASSIGN_OR_RETURN(HttpResponse response, http.Send(request));
//   // response.status: 206; response.body: the bytes
//
// What the network did wrong is a status (UNAVAILABLE: refused, reset, a
// body cut short; DEADLINE_EXCEEDED: no progress in time; CANCELLED: the
// flag was set), naming the URL; what the server said, however bad, is a
// response. TLS peers are verified against the system's CA store. Thread-
// safe: each request takes a libcurl handle from a pool, so connections are
// kept alive and reused across requests of any thread.
#ifndef HETERODL_SRC_STORAGE_HTTP_CLIENT_H_
#define HETERODL_SRC_STORAGE_HTTP_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace heterodl {

// Signing a request with AWS Signature Version 4 (libcurl's
// CURLOPT_AWS_SIGV4).
struct AwsSigV4 {
  // "aws:amz:REGION:SERVICE".
  std::string scope;
  std::string access_key_id;
  std::string secret_access_key;
};

struct HttpRequest {
  std::string method = "GET";  // GET, HEAD, PUT, POST
  std::string url;
  // "Name: value" each.
  std::vector<std::string> headers;
  std::string body;
  // Empty scope: sent unsigned.
  AwsSigV4 aws_sigv4;
  // The whole exchange may take this long.
  absl::Duration timeout = absl::Seconds(60);
  // A body larger than this is refused (FAILED_PRECONDITION), not held.
  uint64_t max_body_bytes = uint64_t{1} << 30;
};

struct HttpResponse {
  int status = 0;
  std::string body;
  // Names lower-cased; the last value of a repeated header.
  absl::flat_hash_map<std::string, std::string> headers;
};

struct HttpClientOptions {
  // Giving up on a connection after this long.
  absl::Duration connect_timeout = absl::Seconds(10);
  // A transfer that moves no byte for this long is abandoned
  // (DEADLINE_EXCEEDED), whatever its whole timeout.
  absl::Duration stall_timeout = absl::Seconds(20);
  // Checked while a request runs: set, the request ends at once
  // (CANCELLED). Must outlive the client.
  const std::atomic<bool>* cancelled = nullptr;
};

class HttpClient {
 public:
  explicit HttpClient(HttpClientOptions options = {});
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Sends `request` and returns the whole response. Errors above.
  absl::StatusOr<HttpResponse> Send(const HttpRequest& request) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Handle;
  std::unique_ptr<Handle> CheckOut() ABSL_LOCKS_EXCLUDED(mu_);
  void CheckIn(std::unique_ptr<Handle> handle) ABSL_LOCKS_EXCLUDED(mu_);

  const HttpClientOptions options_;
  absl::Mutex mu_;
  // Idle handles, each with its live connections.
  std::vector<std::unique_ptr<Handle>> idle_ ABSL_GUARDED_BY(mu_);
};

// "%2F"-style escaping of everything but RFC 3986's unreserved characters
// (and '/' when `keep_slashes`): what S3 keys and query values need, and
// what SigV4's canonical request expects.
std::string UriEscape(const std::string& text, bool keep_slashes);

}  // namespace heterodl

#endif  // HETERODL_SRC_STORAGE_HTTP_CLIENT_H_
