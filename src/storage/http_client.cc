#include "src/storage/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace heterodl {
namespace {

// libcurl's global state, set up once before any handle (it is not
// thread-safe to do later, beside running handles).
void InitCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

using SlistPtr = std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)>;

// What one transfer collects, and what it may.
struct Transfer {
  HttpResponse* response = nullptr;
  // The request's limit; an error document may always be this long (a
  // 416 answering a one-byte range still says why).
  uint64_t max_body_bytes = 0;
  static constexpr uint64_t kMaxErrorBodyBytes = uint64_t{64} << 10;
  bool error_status = false;
  bool too_large = false;
  const std::atomic<bool>* cancelled = nullptr;
};

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<Transfer*>(user);
  const size_t bytes = size * count;
  const uint64_t limit = transfer->error_status
                             ? std::max(transfer->max_body_bytes, Transfer::kMaxErrorBodyBytes)
                             : transfer->max_body_bytes;
  if (transfer->response->body.size() + bytes > limit) {
    transfer->too_large = true;
    return 0;  // libcurl ends the transfer with CURLE_WRITE_ERROR
  }
  transfer->response->body.append(data, bytes);
  return bytes;
}

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<Transfer*>(user);
  const size_t bytes = size * count;
  absl::string_view line(data, bytes);
  if (absl::StartsWith(line, "HTTP/")) {
    transfer->response->headers.clear();  // a new response (after a 100 Continue)
    // "HTTP/1.1 416 Range Not Satisfiable"
    const std::vector<absl::string_view> words = absl::StrSplit(line, ' ');
    int status = 0;
    transfer->error_status =
        words.size() < 2 || !absl::SimpleAtoi(words[1], &status) || status < 200 || status >= 300;
    return bytes;
  }
  const size_t colon = line.find(':');
  if (colon != absl::string_view::npos) {
    transfer->response->headers[absl::AsciiStrToLower(line.substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  }
  return bytes;
}

int OnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* transfer = static_cast<const Transfer*>(user);
  return transfer->cancelled != nullptr && transfer->cancelled->load() ? 1 : 0;
}

}  // namespace

struct HttpClient::Handle {
  Handle() : curl(curl_easy_init()) {}
  ~Handle() { curl_easy_cleanup(curl); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  CURL* curl;
};

HttpClient::HttpClient(HttpClientOptions options) : options_(options) { InitCurlOnce(); }

HttpClient::~HttpClient() = default;

std::unique_ptr<HttpClient::Handle> HttpClient::CheckOut() {
  {
    absl::MutexLock lock(&mu_);
    if (!idle_.empty()) {
      std::unique_ptr<Handle> handle = std::move(idle_.back());
      idle_.pop_back();
      return handle;
    }
  }
  return std::make_unique<Handle>();
}

void HttpClient::CheckIn(std::unique_ptr<Handle> handle) {
  absl::MutexLock lock(&mu_);
  idle_.push_back(std::move(handle));
}

absl::StatusOr<HttpResponse> HttpClient::Send(const HttpRequest& request) {
  std::unique_ptr<Handle> handle = CheckOut();
  if (handle->curl == nullptr) {
    return absl::ResourceExhaustedError("libcurl could not make a handle");
  }
  CURL* curl = handle->curl;
  curl_easy_reset(curl);  // keeps the connections, drops the last request's options
  HttpResponse response;
  Transfer transfer;
  transfer.response = &response;
  transfer.max_body_bytes = request.max_body_bytes;
  transfer.cancelled = options_.cancelled;

  SlistPtr headers(nullptr, curl_slist_free_all);
  for (const std::string& header : request.headers) {
    headers.reset(curl_slist_append(headers.release(), header.c_str()));
  }
  if (!request.body.empty() && request.aws_sigv4.scope.empty()) {
    // libcurl would otherwise send "Expect: 100-continue" for a large body
    // and wait. (Not beside a signature: libcurl 7.88 would sign the header
    // it then leaves out.)
    headers.reset(curl_slist_append(headers.release(), "Expect:"));
  }

  curl_easy_setopt(curl, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(options_.connect_timeout)));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(request.timeout)));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(
      curl, CURLOPT_LOW_SPEED_TIME,
      static_cast<long>(std::max<int64_t>(1, absl::ToInt64Seconds(options_.stall_timeout))));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, OnProgress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  if (request.method == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else if (request.method != "GET") {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, request.method.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(request.body.size()));
  }
  std::string user;
  if (!request.aws_sigv4.scope.empty()) {
    user = absl::StrCat(request.aws_sigv4.access_key_id, ":", request.aws_sigv4.secret_access_key);
    curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, request.aws_sigv4.scope.c_str());
    curl_easy_setopt(curl, CURLOPT_USERPWD, user.c_str());
  }

  char error[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  const CURLcode code = curl_easy_perform(curl);
  long status = 0;  // NOLINT(google-runtime-int): libcurl's type
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  // The credentials must not outlive the request in the pooled handle.
  curl_easy_setopt(curl, CURLOPT_USERPWD, nullptr);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);
  CheckIn(std::move(handle));

  if (code == CURLE_OK) {
    response.status = static_cast<int>(status);
    return response;
  }
  const std::string what = absl::StrCat(request.method, " ", request.url, ": ",
                                        error[0] != '\0' ? error : curl_easy_strerror(code));
  if (transfer.too_large) {
    return absl::FailedPreconditionError(absl::StrCat(
        request.method, " ", request.url, ": the body passes ", request.max_body_bytes, " bytes"));
  }
  switch (code) {
    case CURLE_ABORTED_BY_CALLBACK:
      return absl::CancelledError(absl::StrCat(request.method, " ", request.url, ": cancelled"));
    case CURLE_OPERATION_TIMEDOUT:
      return absl::DeadlineExceededError(what);
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
      return absl::InvalidArgumentError(what);
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
      return absl::FailedPreconditionError(what);
    default:
      return absl::UnavailableError(what);
  }
}

std::string UriEscape(const std::string& text, bool keep_slashes) {
  InitCurlOnce();
  // libcurl's escaping (RFC 3986: all but unreserved characters); its
  // handle argument is unused since 7.82.
  const auto escape = [](absl::string_view part) {
    char* escaped = curl_easy_escape(nullptr, part.data(), static_cast<int>(part.size()));
    std::string result = escaped != nullptr ? escaped : "";
    curl_free(escaped);
    return result;
  };
  if (!keep_slashes) {
    return escape(text);
  }
  std::vector<std::string> parts;
  for (const absl::string_view part : absl::StrSplit(text, '/')) {
    parts.push_back(escape(part));
  }
  return absl::StrJoin(parts, "/");
}

}  // namespace heterodl
