#include "src/storage/s3_client.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "src/common/log.h"
#include "src/common/status_macros.h"
#include "src/storage/xml.h"

namespace heterodl {
namespace {

// SigV4's hash of an empty body: S3 wants the body's hash in a header, and
// libcurl signs what that header says.
constexpr char kEmptyBodySha256[] =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// Whether a failed request may succeed if sent again.
bool Passes(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
}

bool PassesStatus(int status, const std::string& code) {
  return status >= 500 || status == 429 || code == "SlowDown" || code == "RequestTimeout" ||
         code == "InternalError";
}

// What S3 answered, as a status: `what` ("GET s3://b/k"), the code and
// message of its error document (HEAD's have none: the status says).
absl::Status S3Error(const HttpResponse& response, const std::string& what) {
  std::string code;
  std::string message;
  if (absl::StatusOr<XmlTree> tree = ParseXml(response.body); tree.ok()) {
    code = XmlText(*tree, "Error.Code");
    message = XmlText(*tree, "Error.Message");
  }
  if (code.empty()) {
    switch (response.status) {
      case 403:
        code = "AccessDenied";
        break;
      case 404:
        code = "NotFound";
        break;
      default:
        code = absl::StrCat("HTTP ", response.status);
    }
  }
  const std::string text = absl::StrCat(what, ": ", code, " (HTTP ", response.status, ")",
                                        message.empty() ? "" : absl::StrCat(": ", message));
  if (response.status == 404 || code == "NoSuchBucket" || code == "NoSuchKey") {
    return absl::NotFoundError(text);
  }
  if (response.status == 401 || response.status == 403) {
    return absl::PermissionDeniedError(text);
  }
  if (response.status == 416 || code == "InvalidRange") {
    return absl::OutOfRangeError(text);
  }
  if (PassesStatus(response.status, code)) {
    return absl::UnavailableError(text);
  }
  return absl::FailedPreconditionError(text);
}

}  // namespace

S3Options S3OptionsFromEnvironment(const EnvironmentLookup& environment) {
  S3Options options;
  for (const char* name : {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"}) {
    if (std::optional<std::string> endpoint = environment(name); endpoint && !endpoint->empty()) {
      options.endpoint = *endpoint;
      break;
    }
  }
  options.region = AwsRegion(environment);
  options.credentials.environment = environment;
  return options;
}

absl::StatusOr<std::unique_ptr<S3Client>> S3Client::Create(S3Options options) {
  if (options.region.empty()) {
    options.region = AwsRegion(options.credentials.environment);
  }
  if (options.region.empty()) {
    options.region = "us-east-1";
  }
  if (options.max_attempts < 1) {
    return absl::InvalidArgumentError("S3 max_attempts must be at least 1");
  }
  if (!options.endpoint.empty() && !absl::StartsWith(options.endpoint, "http://") &&
      !absl::StartsWith(options.endpoint, "https://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "S3 endpoint '", options.endpoint, "' is not a URL (http://HOST[:PORT] or https://...)"));
  }
  std::unique_ptr<AwsCredentialChain> credentials;
  if (!options.unsigned_requests) {
    options.credentials.cancelled = options.http.cancelled;
    ASSIGN_OR_RETURN(credentials, AwsCredentialChain::Create(options.credentials));
  }
  return std::unique_ptr<S3Client>(new S3Client(std::move(options), std::move(credentials)));
}

S3Client::S3Client(S3Options options, std::unique_ptr<AwsCredentialChain> credentials)
    : options_(std::move(options)), credentials_(std::move(credentials)), http_(options_.http) {
  const bool custom = !options_.endpoint.empty();
  endpoint_ = custom ? std::string(absl::StripSuffix(options_.endpoint, "/"))
                     : absl::StrCat("https://s3.", options_.region, ".amazonaws.com");
  switch (options_.addressing) {
    case S3Options::Addressing::kPath:
      path_style_ = true;
      break;
    case S3Options::Addressing::kVirtualHosted:
      path_style_ = false;
      break;
    case S3Options::Addressing::kAuto:
      path_style_ = custom;
      break;
  }
}

S3Client::~S3Client() = default;

std::string S3Client::UrlOf(const ObjectUrl& url, const std::string& query) const {
  std::string base;
  // A bucket name with dots cannot be a TLS host name's label: path-style.
  if (path_style_ || absl::StrContains(url.bucket, '.')) {
    base = absl::StrCat(endpoint_, "/", url.bucket, "/");
  } else {
    const size_t host = endpoint_.find("://") + 3;
    base = absl::StrCat(endpoint_.substr(0, host), url.bucket, ".", endpoint_.substr(host), "/");
  }
  return absl::StrCat(base, UriEscape(url.key, true), query.empty() ? "" : "?", query);
}

bool S3Client::Backoff(int attempt) {
  const absl::Duration ceiling = std::min(
      options_.max_backoff, options_.first_backoff * (int64_t{1} << std::min(attempt, 20)));
  absl::Duration wait;
  {
    absl::MutexLock lock(&random_mu_);
    wait = absl::Microseconds(absl::Uniform<int64_t>(
        random_, 0, std::max<int64_t>(1, absl::ToInt64Microseconds(ceiling))));
  }
  const absl::Time until = absl::Now() + wait;
  // In slices, so that a stopping server is not held by a backoff.
  while (absl::Now() < until) {
    if (options_.http.cancelled != nullptr && options_.http.cancelled->load()) {
      return false;
    }
    absl::SleepFor(std::min(absl::Milliseconds(50), until - absl::Now()));
  }
  return true;
}

absl::StatusOr<HttpResponse> S3Client::Send(HttpRequest request, const std::string& what) {
  request.timeout = options_.request_timeout;
  if (request.body.empty()) {
    request.headers.push_back(absl::StrCat("x-amz-content-sha256: ", kEmptyBodySha256));
  }
  const size_t fixed_headers = request.headers.size();
  absl::Status last;
  for (int attempt = 0; attempt < options_.max_attempts; ++attempt) {
    if (attempt > 0) {
      retries_.fetch_add(1);
      if (!Backoff(attempt - 1)) {
        return absl::CancelledError(absl::StrCat(what, ": cancelled"));
      }
    }
    request.headers.resize(fixed_headers);
    if (credentials_ != nullptr) {
      ASSIGN_OR_RETURN(const AwsCredentials credentials, credentials_->Get());
      request.aws_sigv4 = {absl::StrCat("aws:amz:", options_.region, ":s3"),
                           credentials.access_key_id, credentials.secret_access_key};
      if (!credentials.session_token.empty()) {
        request.headers.push_back(
            absl::StrCat("x-amz-security-token: ", credentials.session_token));
      }
    }
    requests_.fetch_add(1);
    absl::StatusOr<HttpResponse> response = http_.Send(request);
    if (!response.ok()) {
      last = response.status();
      if (Passes(last)) {
        continue;
      }
      return last;
    }
    bytes_.fetch_add(static_cast<int64_t>(response->body.size()));
    if (response->status >= 200 && response->status < 300) {
      return response;
    }
    last = S3Error(*response, what);
    if (!absl::IsUnavailable(last)) {
      return last;
    }
  }
  return absl::UnavailableError(
      absl::StrCat(last.message(), " (", options_.max_attempts, " attempts)"));
}

absl::StatusOr<std::vector<ObjectInfo>> S3Client::List(const ObjectUrl& prefix) {
  std::vector<ObjectInfo> objects;
  std::string continuation;
  const std::string what = absl::StrCat("list ", prefix.ToString());
  while (true) {
    // The query's parameters sorted by name, as SigV4's canonical form.
    std::string query;
    if (!continuation.empty()) {
      query = absl::StrCat("continuation-token=", UriEscape(continuation, false), "&");
    }
    absl::StrAppend(&query, "list-type=2&prefix=", UriEscape(prefix.key, false));
    HttpRequest request;
    request.url = UrlOf({prefix.bucket, ""}, query);
    ASSIGN_OR_RETURN(const HttpResponse response, Send(request, what));
    ASSIGN_OR_RETURN(const XmlTree tree, ParseXml(response.body));
    const auto result = tree.get_child_optional("ListBucketResult");
    if (!result) {
      return absl::InternalError(absl::StrCat(
          what, ": the answer is no ListBucketResult: ", response.body.substr(0, 200)));
    }
    for (const auto& [name, child] : *result) {
      if (name != "Contents") {
        continue;
      }
      ObjectInfo object;
      object.key = XmlText(child, "Key");
      if (!absl::SimpleAtoi(XmlText(child, "Size"), &object.size)) {
        return absl::InternalError(absl::StrCat(what, ": object ", object.key, " has no size"));
      }
      objects.push_back(std::move(object));
    }
    if (XmlText(*result, "IsTruncated") != "true") {
      return objects;
    }
    continuation = XmlText(*result, "NextContinuationToken");
    if (continuation.empty()) {
      return absl::InternalError(absl::StrCat(what, ": a truncated page without a continuation"));
    }
  }
}

absl::StatusOr<std::string> S3Client::Get(const ObjectUrl& url, uint64_t offset, uint64_t size) {
  if (size == 0) {
    return std::string();
  }
  HttpRequest request;
  request.url = UrlOf(url, "");
  request.headers.push_back(absl::StrCat("Range: bytes=", offset, "-", offset + size - 1));
  request.max_body_bytes = size;
  ASSIGN_OR_RETURN(
      HttpResponse response,
      Send(request, absl::StrCat("GET ", url.ToString(), " bytes ", offset, "+", size)));
  if (response.status == 200 && offset > 0) {
    // A server that ignores ranges sends it all; max_body_bytes refuses
    // that before here unless the object is small.
    return absl::InternalError(
        absl::StrCat("GET ", url.ToString(), ": the server ignored the range (HTTP 200)"));
  }
  return std::move(response.body);
}

absl::StatusOr<std::string> S3Client::GetAll(const ObjectUrl& url, uint64_t max_bytes) {
  HttpRequest request;
  request.url = UrlOf(url, "");
  request.max_body_bytes = max_bytes;
  ASSIGN_OR_RETURN(HttpResponse response, Send(request, absl::StrCat("GET ", url.ToString())));
  return std::move(response.body);
}

absl::StatusOr<uint64_t> S3Client::Size(const ObjectUrl& url) {
  HttpRequest request;
  request.method = "HEAD";
  request.url = UrlOf(url, "");
  ASSIGN_OR_RETURN(const HttpResponse response,
                   Send(request, absl::StrCat("HEAD ", url.ToString())));
  uint64_t size = 0;
  const auto length = response.headers.find("content-length");
  if (length == response.headers.end() || !absl::SimpleAtoi(length->second, &size)) {
    return absl::InternalError(absl::StrCat("HEAD ", url.ToString(), ": no Content-Length"));
  }
  return size;
}

absl::Status S3Client::Put(const ObjectUrl& url, const std::string& body) {
  HttpRequest request;
  request.method = "PUT";
  request.url = UrlOf(url, "");
  request.body = body;
  request.headers.push_back("x-amz-content-sha256: UNSIGNED-PAYLOAD");
  request.headers.push_back("Content-Type: application/octet-stream");
  return Send(request, absl::StrCat("PUT ", url.ToString())).status();
}

S3Client::Counts S3Client::counts() const {
  return {requests_.load(), retries_.load(), bytes_.load()};
}

}  // namespace heterodl
