#include "src/storage/aws_credentials.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_http_server.h"
#include "tests/testing/status_testing.h"

namespace heterodl {
namespace {

using ::testing::HasSubstr;

// An environment of the test's own: nothing of the machine's leaks in.
EnvironmentLookup Variables(const std::map<std::string, std::string>& variables) {
  return [variables](const std::string& name) -> std::optional<std::string> {
    const auto found = variables.find(name);
    if (found == variables.end()) {
      return std::nullopt;
    }
    return found->second;
  };
}

// The same without the instance metadata service (a test that wants one
// names its endpoint).
EnvironmentLookup Environment(std::map<std::string, std::string> variables) {
  variables.emplace("AWS_EC2_METADATA_DISABLED", "true");
  return Variables(variables);
}

std::filesystem::path Scratch(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  std::filesystem::path path = std::filesystem::path(root != nullptr ? root : "/tmp") /
                               absl::StrCat("aws_credentials_test-", getpid(), "-", name);
  std::filesystem::create_directories(path);
  return path;
}

std::string Write(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path) << text;
  return path.string();
}

AwsCredentialOptions Options(EnvironmentLookup environment) {
  AwsCredentialOptions options;
  options.environment = std::move(environment);
  return options;
}

// "2026-...Z", `from_now` ahead.
std::string Rfc3339(absl::Duration from_now) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now() + from_now, absl::UTCTimeZone());
}

TEST(AwsCredentialsTest, TheEnvironmentComesFirstWithItsSessionToken) {
  const std::filesystem::path home = Scratch("env-first");
  std::filesystem::create_directories(home / ".aws");
  Write(home / ".aws/credentials",
        "[default]\naws_access_key_id = FILE\naws_secret_access_key = S\n");
  ASSERT_OK_AND_ASSIGN(auto chain, AwsCredentialChain::Create(
                                       Options(Environment({{"HOME", home.string()},
                                                            {"AWS_ACCESS_KEY_ID", "ENVKEY"},
                                                            {"AWS_SECRET_ACCESS_KEY", "ENVSECRET"},
                                                            {"AWS_SESSION_TOKEN", "TOKEN"}}))));
  ASSERT_OK_AND_ASSIGN(const AwsCredentials credentials, chain->Get());
  EXPECT_EQ(credentials.access_key_id, "ENVKEY");
  EXPECT_EQ(credentials.secret_access_key, "ENVSECRET");
  EXPECT_EQ(credentials.session_token, "TOKEN");
  EXPECT_THAT(credentials.source, HasSubstr("environment"));

  const auto half = AwsCredentialChain::Create(
      Options(Environment({{"AWS_ACCESS_KEY_ID", "ENVKEY"}, {"HOME", home.string()}})));
  EXPECT_TRUE(absl::IsInvalidArgument(half.status())) << half.status();
  EXPECT_THAT(half.status().message(), HasSubstr("AWS_SECRET_ACCESS_KEY"));
}

TEST(AwsCredentialsTest, TheSharedFilesGiveTheNamedProfile) {
  const std::filesystem::path dir = Scratch("profiles");
  const std::string credentials_file =
      Write(dir / "credentials",
            "[default]\naws_access_key_id = DEFAULTKEY\naws_secret_access_key = DS\n"
            "[training]\naws_access_key_id = TRAINKEY\naws_secret_access_key = TS\n"
            "aws_session_token = TT\n"
            "[broken]\naws_access_key_id = ONLYKEY\n");
  const std::string config_file = Write(dir / "config",
                                        "[default]\nregion = eu-west-1\n"
                                        "[profile configured]\nregion = ap-south-1\n"
                                        "aws_access_key_id = CONFKEY\naws_secret_access_key = CS\n"
                                        "[profile sso]\nsso_session = corp\n");
  const auto with = [&](const std::string& profile) {
    std::map<std::string, std::string> variables = {
        {"AWS_SHARED_CREDENTIALS_FILE", credentials_file}, {"AWS_CONFIG_FILE", config_file}};
    if (!profile.empty()) {
      variables["AWS_PROFILE"] = profile;
    }
    return Environment(variables);
  };
  ASSERT_OK_AND_ASSIGN(auto chain, AwsCredentialChain::Create(Options(with(""))));
  ASSERT_OK_AND_ASSIGN(AwsCredentials credentials, chain->Get());
  EXPECT_EQ(credentials.access_key_id, "DEFAULTKEY");
  EXPECT_THAT(credentials.source, HasSubstr("profile default"));
  EXPECT_EQ(AwsRegion(with("")), "eu-west-1");

  ASSERT_OK_AND_ASSIGN(chain, AwsCredentialChain::Create(Options(with("training"))));
  ASSERT_OK_AND_ASSIGN(credentials, chain->Get());
  EXPECT_EQ(credentials.access_key_id, "TRAINKEY");
  EXPECT_EQ(credentials.session_token, "TT");

  // Keys in the config file's "[profile NAME]" count too, as its region.
  ASSERT_OK_AND_ASSIGN(chain, AwsCredentialChain::Create(Options(with("configured"))));
  ASSERT_OK_AND_ASSIGN(credentials, chain->Get());
  EXPECT_EQ(credentials.access_key_id, "CONFKEY");
  EXPECT_EQ(AwsRegion(with("configured")), "ap-south-1");

  const auto broken = AwsCredentialChain::Create(Options(with("broken")));
  EXPECT_TRUE(absl::IsInvalidArgument(broken.status())) << broken.status();
  const auto missing = AwsCredentialChain::Create(Options(with("nobody")));
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_THAT(missing.status().message(), HasSubstr("AWS_PROFILE names profile nobody"));
  const auto sso = AwsCredentialChain::Create(Options(with("sso")));
  EXPECT_TRUE(absl::IsUnimplemented(sso.status())) << sso.status();
  EXPECT_THAT(sso.status().message(), HasSubstr("sso_session"));
}

TEST(AwsCredentialsTest, TheRegionComesFromTheEnvironmentBeforeTheProfile) {
  const std::string config = Write(Scratch("region") / "config", "[default]\nregion = eu-west-1\n");
  EXPECT_EQ(AwsRegion(Environment({{"AWS_REGION", "us-west-2"},
                                   {"AWS_DEFAULT_REGION", "us-east-2"},
                                   {"AWS_CONFIG_FILE", config}})),
            "us-west-2");
  EXPECT_EQ(
      AwsRegion(Environment({{"AWS_DEFAULT_REGION", "us-east-2"}, {"AWS_CONFIG_FILE", config}})),
      "us-east-2");
  EXPECT_EQ(AwsRegion(Environment({})), "");
}

TEST(AwsCredentialsTest, NoSourceNamesEveryPlaceItLooked) {
  const auto none =
      AwsCredentialChain::Create(Options(Environment({{"HOME", Scratch("nothing").string()}})));
  ASSERT_TRUE(absl::IsNotFound(none.status())) << none.status();
  EXPECT_THAT(none.status().message(), HasSubstr("AWS_ACCESS_KEY_ID"));
  EXPECT_THAT(none.status().message(), HasSubstr("AWS_WEB_IDENTITY_TOKEN_FILE"));
  EXPECT_THAT(none.status().message(), HasSubstr("AWS_CONTAINER_CREDENTIALS"));
  EXPECT_THAT(none.status().message(), HasSubstr("AWS_EC2_METADATA_DISABLED"));
}

// What STS's AssumeRoleWithWebIdentity answers.
std::string StsAnswer(const std::string& key, absl::Duration lifetime) {
  return absl::StrCat(
      "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
      "<AssumeRoleWithWebIdentityResult><Credentials>"
      "<AccessKeyId>",
      key,
      "</AccessKeyId><SecretAccessKey>SECRET</SecretAccessKey>"
      "<SessionToken>SESSION</SessionToken><Expiration>",
      Rfc3339(lifetime),
      "</Expiration></Credentials></AssumeRoleWithWebIdentityResult>"
      "</AssumeRoleWithWebIdentityResponse>");
}

TEST(AwsCredentialsTest, AWebIdentityTokenIsExchangedWithStsAndRenewedBeforeItExpires) {
  absl::Mutex mu;
  int issued = 0;
  ASSERT_OK_AND_ASSIGN(
      auto sts, FakeHttpServer::Start([&](const FakeHttpRequest& request) {
        absl::MutexLock lock(&mu);
        ++issued;
        // Six minutes: within the five-minute margin of
        // renewal one minute later; here, at once with a
        // margin of seven.
        return FakeHttpReply{.body = StsAnswer(absl::StrCat("ROLEKEY", issued), absl::Minutes(6))};
      }));
  const std::string token = Write(Scratch("web-identity") / "token", "eyJ.token.sig\n");
  AwsCredentialOptions options = Options(Environment({{"AWS_WEB_IDENTITY_TOKEN_FILE", token},
                                                      {"AWS_ROLE_ARN", "arn:aws:iam::1:role/r"},
                                                      {"AWS_ROLE_SESSION_NAME", "trainer"},
                                                      {"AWS_ENDPOINT_URL_STS", sts->url()}}));
  options.refresh_margin = absl::Minutes(7);
  ASSERT_OK_AND_ASSIGN(auto chain, AwsCredentialChain::Create(options));
  const std::vector<FakeHttpRequest> sent = sts->requests();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].method, "POST");
  EXPECT_THAT(sent[0].body, HasSubstr("Action=AssumeRoleWithWebIdentity"));
  EXPECT_THAT(sent[0].body, HasSubstr("RoleArn=arn%3Aaws%3Aiam%3A%3A1%3Arole%2Fr"));
  EXPECT_THAT(sent[0].body, HasSubstr("RoleSessionName=trainer"));
  EXPECT_THAT(sent[0].body, HasSubstr("WebIdentityToken=eyJ.token.sig"));
  ASSERT_OK_AND_ASSIGN(const AwsCredentials renewed, chain->Get());
  EXPECT_EQ(renewed.access_key_id, "ROLEKEY2");
  EXPECT_EQ(renewed.session_token, "SESSION");
  EXPECT_THAT(renewed.source, HasSubstr("arn:aws:iam::1:role/r"));
}

TEST(AwsCredentialsTest, StsRefusingTheTokenIsPermissionDeniedWithItsCode) {
  ASSERT_OK_AND_ASSIGN(auto sts, FakeHttpServer::Start([](const FakeHttpRequest&) {
                         return FakeHttpReply{
                             .status = 403,
                             .body =
                                 "<ErrorResponse><Error><Code>InvalidIdentityToken</Code>"
                                 "<Message>No OpenIDConnect provider found</Message>"
                                 "</Error></ErrorResponse>"};
                       }));
  const std::string token = Write(Scratch("refused") / "token", "t");
  const auto chain =
      AwsCredentialChain::Create(Options(Environment({{"AWS_WEB_IDENTITY_TOKEN_FILE", token},
                                                      {"AWS_ROLE_ARN", "arn:aws:iam::1:role/r"},
                                                      {"AWS_ENDPOINT_URL", sts->url()}})));
  ASSERT_TRUE(absl::IsPermissionDenied(chain.status())) << chain.status();
  EXPECT_THAT(chain.status().message(), HasSubstr("InvalidIdentityToken"));
  EXPECT_THAT(chain.status().message(), HasSubstr("No OpenIDConnect provider found"));
}

TEST(AwsCredentialsTest, ContainerCredentialsAreFetchedWithTheAuthorizationToken) {
  ASSERT_OK_AND_ASSIGN(
      auto agent, FakeHttpServer::Start([](const FakeHttpRequest& request) {
        if (request.header("authorization") != "pod-secret") {
          return FakeHttpReply{.status = 401, .body = "who?"};
        }
        return FakeHttpReply{
            .body = absl::StrCat(R"({"AccessKeyId":"PODKEY","SecretAccessKey":"S","Token":"T",)",
                                 R"("Expiration":")", Rfc3339(absl::Hours(1)), R"("})")};
      }));
  const std::string token_file = Write(Scratch("container") / "token", "pod-secret\n");
  ASSERT_OK_AND_ASSIGN(
      auto chain, AwsCredentialChain::Create(Options(Environment(
                      {{"AWS_CONTAINER_CREDENTIALS_FULL_URI", agent->url() + "/v1/credentials"},
                       {"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", token_file}}))));
  ASSERT_OK_AND_ASSIGN(const AwsCredentials credentials, chain->Get());
  EXPECT_EQ(credentials.access_key_id, "PODKEY");
  EXPECT_EQ(credentials.session_token, "T");
  EXPECT_EQ(agent->requests().at(0).target, "/v1/credentials");

  const auto refused = AwsCredentialChain::Create(Options(
      Environment({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", agent->url() + "/v1/credentials"}})));
  EXPECT_TRUE(absl::IsPermissionDenied(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("HTTP 401"));
}

TEST(AwsCredentialsTest, InstanceMetadataIsReadWithAnImdsV2SessionToken) {
  ASSERT_OK_AND_ASSIGN(
      auto imds, FakeHttpServer::Start([](const FakeHttpRequest& request) {
        if (request.method == "PUT" && request.target == "/latest/api/token") {
          return request.header("x-aws-ec2-metadata-token-ttl-seconds").empty()
                     ? FakeHttpReply{.status = 400}
                     : FakeHttpReply{.body = "SESSION-TOKEN"};
        }
        if (request.header("x-aws-ec2-metadata-token") != "SESSION-TOKEN") {
          return FakeHttpReply{.status = 401};
        }
        if (request.target == "/latest/meta-data/iam/security-credentials/") {
          return FakeHttpReply{.body = "training-role\n"};
        }
        if (request.target == "/latest/meta-data/iam/security-credentials/training-role") {
          return FakeHttpReply{
              .body = absl::StrCat(R"({"Code":"Success","AccessKeyId":"EC2KEY",)",
                                   R"("SecretAccessKey":"S","Token":"T","Expiration":")",
                                   Rfc3339(absl::Hours(6)), R"("})")};
        }
        return FakeHttpReply{.status = 404};
      }));
  ASSERT_OK_AND_ASSIGN(auto chain, AwsCredentialChain::Create(Options(Variables(
                                       {{"AWS_EC2_METADATA_SERVICE_ENDPOINT", imds->url()}}))));
  ASSERT_OK_AND_ASSIGN(const AwsCredentials credentials, chain->Get());
  EXPECT_EQ(credentials.access_key_id, "EC2KEY");
  EXPECT_THAT(credentials.source, HasSubstr("training-role"));
}

TEST(AwsCredentialsTest, AHostWithoutAMetadataServiceFindsOutQuickly) {
  // A port nothing listens on: refused at once, so "none here".
  ASSERT_OK_AND_ASSIGN(
      auto closed, FakeHttpServer::Start([](const FakeHttpRequest&) { return FakeHttpReply{}; }));
  const std::string url = closed->url();
  closed.reset();
  const auto none =
      AwsCredentialChain::Create(Options(Variables({{"AWS_EC2_METADATA_SERVICE_ENDPOINT", url}})));
  ASSERT_TRUE(absl::IsNotFound(none.status())) << none.status();
  EXPECT_THAT(none.status().message(), HasSubstr("no instance metadata service at " + url));
}

TEST(AwsCredentialsTest, ExpiredCredentialsThatCannotBeRenewedAreAnError) {
  absl::Mutex mu;
  bool up = true;
  ASSERT_OK_AND_ASSIGN(
      auto agent, FakeHttpServer::Start([&](const FakeHttpRequest&) {
        absl::MutexLock lock(&mu);
        if (!up) {
          return FakeHttpReply{.status = 500, .body = "down"};
        }
        // Already within the margin: every Get() renews.
        return FakeHttpReply{
            .body = absl::StrCat(R"({"AccessKeyId":"K","SecretAccessKey":"S","Token":"T",)",
                                 R"("Expiration":")", Rfc3339(absl::Seconds(2)), R"("})")};
      }));
  AwsCredentialOptions options =
      Options(Environment({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", agent->url() + "/creds"}}));
  ASSERT_OK_AND_ASSIGN(auto chain, AwsCredentialChain::Create(options));
  {
    absl::MutexLock lock(&mu);
    up = false;
  }
  // Still valid: the old ones serve while renewal fails.
  ASSERT_OK_AND_ASSIGN(const AwsCredentials current, chain->Get());
  EXPECT_EQ(current.access_key_id, "K");
  absl::SleepFor(absl::Seconds(2.5));
  const absl::StatusOr<AwsCredentials> expired = chain->Get();
  ASSERT_TRUE(absl::IsUnauthenticated(expired.status())) << expired.status();
  EXPECT_THAT(expired.status().message(), HasSubstr("expired and cannot be renewed"));
}

}  // namespace
}  // namespace heterodl
