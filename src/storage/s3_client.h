// S3Client: the S3 REST API's reads (ListObjectsV2, GetObject with a
// range, HeadObject) against Amazon S3 or any S3-compatible store (MinIO,
// Ceph's RGW, GCS's interoperability API), signed with SigV4 by libcurl.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<S3Client> s3,
//                    S3Client::Create(S3OptionsFromEnvironment(ProcessEnvironment())));
//   ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects, s3->List({"bucket", "train/"}));
//   ASSIGN_OR_RETURN(std::string bytes, s3->Get({"bucket", "train/0.tar"}, 512, 1 << 20));
//
// Failures that pass (HTTP 5xx, SlowDown, a timeout, a reset, a body cut
// short) are retried with exponential backoff and full jitter, up to
// `max_attempts` requests; what is left is a status naming the URL and
// what S3 said: NOT_FOUND (NoSuchBucket, NoSuchKey), PERMISSION_DENIED
// (AccessDenied, InvalidAccessKeyId, SignatureDoesNotMatch, ...),
// UNAVAILABLE (still failing after the retries), CANCELLED (the flag).
// Thread-safe.
#ifndef HETERODL_SRC_STORAGE_S3_CLIENT_H_
#define HETERODL_SRC_STORAGE_S3_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/storage/aws_credentials.h"
#include "src/storage/http_client.h"
#include "src/storage/object_url.h"

namespace heterodl {

struct S3Options {
  // Empty: Amazon S3's endpoint for the region. Otherwise a custom one
  // ("http://minio:9000"): AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, or
  // --s3-endpoint.
  std::string endpoint;
  // Empty: AwsRegion() of the environment, else us-east-1.
  std::string region;
  enum class Addressing {
    kAuto,           // path-style for a custom endpoint, virtual-hosted for AWS
    kPath,           // ENDPOINT/BUCKET/KEY
    kVirtualHosted,  // BUCKET.ENDPOINT/KEY
  };
  Addressing addressing = Addressing::kAuto;
  // Requests sent without a signature (a public bucket; no credentials
  // looked for).
  bool unsigned_requests = false;
  // Requests per operation, the first included.
  int max_attempts = 6;
  // The backoff before retry n is drawn from [0, min(max_backoff,
  // first_backoff * 2^n)].
  absl::Duration first_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(5);
  // One request's whole time.
  absl::Duration request_timeout = absl::Seconds(60);
  HttpClientOptions http;
  AwsCredentialOptions credentials;
};

// The options the environment gives: the endpoint (AWS_ENDPOINT_URL_S3,
// else AWS_ENDPOINT_URL) and the region (AwsRegion).
S3Options S3OptionsFromEnvironment(const EnvironmentLookup& environment);

struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
};

class S3Client {
 public:
  // Finds the credentials (AwsCredentialChain) unless unsigned; their
  // error otherwise. Sends no request to S3.
  static absl::StatusOr<std::unique_ptr<S3Client>> Create(S3Options options);
  ~S3Client();

  // Every object whose key starts with `prefix.key`, all pages of
  // ListObjectsV2, in S3's order (keys by their UTF-8 bytes).
  absl::StatusOr<std::vector<ObjectInfo>> List(const ObjectUrl& prefix);
  // `size` bytes of the object from `offset` (one range GET); fewer only at
  // the object's end. OUT_OF_RANGE when `offset` is past it.
  absl::StatusOr<std::string> Get(const ObjectUrl& url, uint64_t offset, uint64_t size);
  // The whole object, up to `max_bytes` (FAILED_PRECONDITION past it).
  absl::StatusOr<std::string> GetAll(const ObjectUrl& url, uint64_t max_bytes = uint64_t{1} << 30);
  // The object's size (HeadObject).
  absl::StatusOr<uint64_t> Size(const ObjectUrl& url);
  // Writes `body` as the object `url` (PutObject), the payload unsigned
  // (UNSIGNED-PAYLOAD: the signature covers the request, not the bytes).
  absl::Status Put(const ObjectUrl& url, const std::string& body);

  // What it sent so far.
  struct Counts {
    int64_t requests = 0;  // retries included
    int64_t retries = 0;
    int64_t bytes = 0;  // of response bodies
  };
  Counts counts() const;

  const std::string& region() const { return options_.region; }
  const std::string& endpoint() const { return endpoint_; }

 private:
  S3Client(S3Options options, std::unique_ptr<AwsCredentialChain> credentials);

  // The URL of `url`'s object (its key escaped), and of its bucket (with a
  // trailing '/') when the key is empty, with `query` (already canonical:
  // sorted, escaped).
  std::string UrlOf(const ObjectUrl& url, const std::string& query) const;
  // Signs and sends `request`, retrying what passes; the response when S3
  // answered `expected` statuses' kind (2xx), else the error. `what` names
  // the request in errors ("s3://bucket/key").
  absl::StatusOr<HttpResponse> Send(HttpRequest request, const std::string& what);
  // Sleeps before retry `attempt`; false when cancelled meanwhile.
  bool Backoff(int attempt) ABSL_LOCKS_EXCLUDED(random_mu_);

  const S3Options options_;
  std::string endpoint_;  // scheme://host[:port], no trailing '/'
  bool path_style_ = true;
  const std::unique_ptr<AwsCredentialChain> credentials_;  // null when unsigned
  HttpClient http_;
  std::atomic<int64_t> requests_{0};
  std::atomic<int64_t> retries_{0};
  std::atomic<int64_t> bytes_{0};
  absl::Mutex random_mu_;
  absl::BitGen random_ ABSL_GUARDED_BY(random_mu_);
};

}  // namespace heterodl

#endif  // HETERODL_SRC_STORAGE_S3_CLIENT_H_
