// AWS credentials, found where the AWS SDKs look, in their order:
//
//   1. the environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and
//      AWS_SESSION_TOKEN);
//   2. the shared files' profile (AWS_PROFILE, else "default"):
//      ~/.aws/credentials (AWS_SHARED_CREDENTIALS_FILE) and ~/.aws/config
//      (AWS_CONFIG_FILE), keys or a role_arn + web_identity_token_file;
//   3. web identity (what EKS's IAM roles for service accounts give):
//      AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN, exchanged with STS's
//      AssumeRoleWithWebIdentity;
//   4. container credentials (ECS, EKS Pod Identity):
//      AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI, with
//      AWS_CONTAINER_AUTHORIZATION_TOKEN(_FILE);
//   5. the EC2 instance metadata service, IMDSv2 (a session token first),
//      unless AWS_EC2_METADATA_DISABLED=true.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<AwsCredentialChain> chain,
//                    AwsCredentialChain::Create({}));
//   ASSIGN_OR_RETURN(AwsCredentials credentials, chain->Get());  // renewed as they age
//
// Temporary credentials (3 to 5) are fetched again before they expire, by
// the call to Get() that finds them within `refresh_margin` of it; the old
// ones serve until the new ones come.
#ifndef HETERODL_SRC_STORAGE_AWS_CREDENTIALS_H_
#define HETERODL_SRC_STORAGE_AWS_CREDENTIALS_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/storage/http_client.h"

namespace heterodl {

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty for long-term keys
  absl::Time expiration = absl::InfiniteFuture();
  // Where they came from, for the log: "environment", "profile default
  // (/root/.aws/credentials)", "web identity (arn:...)", ...
  std::string source;
};

// Reads an environment variable: nullopt when unset. The process's by
// default; tests pass their own.
using EnvironmentLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvironmentLookup ProcessEnvironment();

struct AwsCredentialOptions {
  EnvironmentLookup environment = ProcessEnvironment();
  // How long the metadata services (container, EC2) may take to answer: a
  // host that has none must not wait long to find out.
  absl::Duration metadata_timeout = absl::Seconds(2);
  // Temporary credentials are renewed this long before they expire.
  absl::Duration refresh_margin = absl::Minutes(5);
  // Checked while a request runs (HttpClientOptions::cancelled).
  const std::atomic<bool>* cancelled = nullptr;
};

class AwsCredentialChain {
 public:
  // Finds the first source that has credentials and fetches them.
  // NOT_FOUND naming every place it looked when none has; the source's own
  // error when one is configured but fails (a profile without a secret, a
  // token file that cannot be read, STS refusing the token: PERMISSION_DENIED
  // with STS's code and message).
  static absl::StatusOr<std::unique_ptr<AwsCredentialChain>> Create(
      const AwsCredentialOptions& options);
  ~AwsCredentialChain();

  // The credentials to sign with now. Renews them near expiry; an error
  // only when they have expired and cannot be renewed.
  absl::StatusOr<AwsCredentials> Get() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Fetch = std::function<absl::StatusOr<AwsCredentials>()>;
  AwsCredentialChain(AwsCredentialOptions options, std::unique_ptr<HttpClient> http)
      : options_(std::move(options)), http_(std::move(http)) {}

  const AwsCredentialOptions options_;
  const std::unique_ptr<HttpClient> http_;
  // How the chosen source fetches (again).
  Fetch fetch_;
  absl::Mutex mu_;
  AwsCredentials current_ ABSL_GUARDED_BY(mu_);
  // After a failed renewal, the current credentials serve (while they are
  // valid) without asking again until then.
  absl::Time retry_after_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// The region requests are signed for, as the SDKs find it: AWS_REGION,
// AWS_DEFAULT_REGION, the profile's `region` in the config file; empty
// when none says.
std::string AwsRegion(const EnvironmentLookup& environment);

}  // namespace heterodl

#endif  // HETERODL_SRC_STORAGE_AWS_CREDENTIALS_H_
