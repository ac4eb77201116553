#include "src/storage/aws_credentials.h"

#include <cstdlib>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "boost/property_tree/ini_parser.hpp"
#include "nlohmann/json.hpp"
#include "src/common/log.h"
#include "src/common/read_file.h"
#include "src/common/status_macros.h"
#include "src/storage/xml.h"

namespace heterodl {
namespace {

using Fetch = std::function<absl::StatusOr<AwsCredentials>()>;

std::string Lookup(const EnvironmentLookup& environment, const std::string& name) {
  return environment(name).value_or("");
}

// "2026-11-26T01:00:00Z" (STS, the metadata services); InfiniteFuture when
// absent.
absl::StatusOr<absl::Time> ParseExpiration(const std::string& text, const std::string& source) {
  if (text.empty()) {
    return absl::InfiniteFuture();
  }
  absl::Time time;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, text, &time, &error)) {
    return absl::InternalError(
        absl::StrCat(source, ": an expiration that is no time: '", text, "' (", error, ")"));
  }
  return time;
}

// An INI file of the shared configuration: its sections, or nullopt when
// the file does not exist.
absl::StatusOr<std::optional<boost::property_tree::ptree>> ReadIni(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (absl::IsNotFound(text.status())) {
    return std::nullopt;
  }
  RETURN_IF_ERROR(text.status());
  std::istringstream stream(*text);
  boost::property_tree::ptree tree;
  try {
    boost::property_tree::read_ini(stream, tree);
  } catch (const boost::property_tree::ini_parser_error& error) {
    return absl::InvalidArgumentError(absl::StrCat("AWS shared file ", path, ": ", error.message(),
                                                   " (line ", error.line(), ")"));
  }
  return tree;
}

// The section of `profile` in `tree`, as `ReadIni` gives it; null if none.
const boost::property_tree::ptree* Section(const boost::property_tree::ptree& tree,
                                           const std::string& name) {
  for (const auto& [key, section] : tree) {
    if (absl::StripAsciiWhitespace(key) == name) {
      return &section;
    }
  }
  return nullptr;
}

std::string Value(const boost::property_tree::ptree* section, const std::string& key) {
  if (section == nullptr) {
    return "";
  }
  for (const auto& [name, value] : *section) {
    if (absl::StripAsciiWhitespace(name) == key) {
      return std::string(absl::StripAsciiWhitespace(value.data()));
    }
  }
  return "";
}

// Where the shared files are.
struct SharedFiles {
  std::string profile;
  bool profile_named = false;  // AWS_PROFILE set: a missing profile is an error
  std::string credentials_path;
  std::string config_path;
};

SharedFiles FindSharedFiles(const EnvironmentLookup& environment) {
  SharedFiles files;
  files.profile = Lookup(environment, "AWS_PROFILE");
  files.profile_named = !files.profile.empty();
  if (files.profile.empty()) {
    files.profile = "default";
  }
  const std::string home = Lookup(environment, "HOME");
  files.credentials_path = Lookup(environment, "AWS_SHARED_CREDENTIALS_FILE");
  if (files.credentials_path.empty() && !home.empty()) {
    files.credentials_path = absl::StrCat(home, "/.aws/credentials");
  }
  files.config_path = Lookup(environment, "AWS_CONFIG_FILE");
  if (files.config_path.empty() && !home.empty()) {
    files.config_path = absl::StrCat(home, "/.aws/config");
  }
  return files;
}

// The profile's section of the config file ("[profile NAME]", or
// "[default]").
absl::StatusOr<std::optional<boost::property_tree::ptree>> ConfigSection(const SharedFiles& files) {
  if (files.config_path.empty()) {
    return std::nullopt;
  }
  ASSIGN_OR_RETURN(std::optional<boost::property_tree::ptree> config, ReadIni(files.config_path));
  if (!config) {
    return std::nullopt;
  }
  const boost::property_tree::ptree* section = Section(*config, "profile " + files.profile);
  if (section == nullptr && files.profile == "default") {
    section = Section(*config, "default");
  }
  if (section == nullptr) {
    return std::nullopt;
  }
  return *section;
}

absl::StatusOr<AwsCredentials> FromEnvironment(const EnvironmentLookup& environment) {
  AwsCredentials credentials;
  credentials.access_key_id = Lookup(environment, "AWS_ACCESS_KEY_ID");
  credentials.secret_access_key = Lookup(environment, "AWS_SECRET_ACCESS_KEY");
  credentials.session_token = Lookup(environment, "AWS_SESSION_TOKEN");
  credentials.source = "environment (AWS_ACCESS_KEY_ID)";
  if (credentials.access_key_id.empty() && credentials.secret_access_key.empty()) {
    return absl::NotFoundError("the environment has no AWS_ACCESS_KEY_ID");
  }
  if (credentials.access_key_id.empty() || credentials.secret_access_key.empty()) {
    return absl::InvalidArgumentError(
        "the environment sets one of AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY without the "
        "other");
  }
  return credentials;
}

// Exchanges a web identity token for a role's credentials (STS
// AssumeRoleWithWebIdentity, a request STS needs no signature on).
absl::StatusOr<AwsCredentials> AssumeRoleWithWebIdentity(HttpClient& http,
                                                         const EnvironmentLookup& environment,
                                                         const std::string& role_arn,
                                                         const std::string& token_file,
                                                         std::string session_name) {
  ASSIGN_OR_RETURN(std::string token, ReadFileToString(token_file));
  token = std::string(absl::StripAsciiWhitespace(token));
  if (session_name.empty()) {
    session_name = absl::StrCat("heterodl-", absl::ToUnixMillis(absl::Now()));
  }
  std::string endpoint = Lookup(environment, "AWS_ENDPOINT_URL_STS");
  if (endpoint.empty()) {
    endpoint = Lookup(environment, "AWS_ENDPOINT_URL");
  }
  if (endpoint.empty()) {
    const std::string region = AwsRegion(environment);
    endpoint = region.empty() ? "https://sts.amazonaws.com"
                              : absl::StrCat("https://sts.", region, ".amazonaws.com");
  }
  HttpRequest request;
  request.method = "POST";
  request.url = absl::StrCat(absl::StripSuffix(endpoint, "/"), "/");
  request.headers.push_back("Content-Type: application/x-www-form-urlencoded");
  request.body = absl::StrCat(
      "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=", UriEscape(role_arn, false),
      "&RoleSessionName=", UriEscape(session_name, false),
      "&WebIdentityToken=", UriEscape(token, false));
  request.timeout = absl::Seconds(30);
  const std::string source = absl::StrCat("web identity (", role_arn, " through ", endpoint, ")");
  ASSIGN_OR_RETURN(const HttpResponse response, http.Send(request));
  absl::StatusOr<XmlTree> tree = ParseXml(response.body);
  if (response.status != 200) {
    const std::string code = tree.ok() ? XmlText(*tree, "ErrorResponse.Error.Code") : "";
    const std::string message = tree.ok() ? XmlText(*tree, "ErrorResponse.Error.Message") : "";
    return absl::PermissionDeniedError(
        absl::StrCat(source, ": STS answered HTTP ", response.status, " ", code, ": ", message));
  }
  RETURN_IF_ERROR(tree.status());
  const std::string prefix =
      "AssumeRoleWithWebIdentityResponse.AssumeRoleWithWebIdentityResult.Credentials.";
  AwsCredentials credentials;
  credentials.access_key_id = XmlText(*tree, prefix + "AccessKeyId");
  credentials.secret_access_key = XmlText(*tree, prefix + "SecretAccessKey");
  credentials.session_token = XmlText(*tree, prefix + "SessionToken");
  ASSIGN_OR_RETURN(credentials.expiration,
                   ParseExpiration(XmlText(*tree, prefix + "Expiration"), source));
  credentials.source = source;
  if (credentials.access_key_id.empty() || credentials.secret_access_key.empty()) {
    return absl::InternalError(absl::StrCat(source, ": STS's answer has no credentials"));
  }
  return credentials;
}

// The profile's keys, or a Fetch for its role (role_arn +
// web_identity_token_file); NOT_FOUND when the files do not name it.
absl::StatusOr<Fetch> FromSharedFiles(HttpClient& http, const EnvironmentLookup& environment) {
  const SharedFiles files = FindSharedFiles(environment);
  std::optional<boost::property_tree::ptree> credentials_file;
  if (!files.credentials_path.empty()) {
    ASSIGN_OR_RETURN(credentials_file, ReadIni(files.credentials_path));
  }
  ASSIGN_OR_RETURN(const std::optional<boost::property_tree::ptree> config, ConfigSection(files));
  const boost::property_tree::ptree* keys =
      credentials_file ? Section(*credentials_file, files.profile) : nullptr;
  const boost::property_tree::ptree* config_section = config ? &*config : nullptr;
  for (const boost::property_tree::ptree* section : {keys, config_section}) {
    AwsCredentials credentials;
    credentials.access_key_id = Value(section, "aws_access_key_id");
    credentials.secret_access_key = Value(section, "aws_secret_access_key");
    credentials.session_token = Value(section, "aws_session_token");
    if (credentials.access_key_id.empty() && credentials.secret_access_key.empty()) {
      continue;
    }
    const std::string path = section == keys ? files.credentials_path : files.config_path;
    if (credentials.access_key_id.empty() || credentials.secret_access_key.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("AWS profile ", files.profile, " in ", path,
                       " has one of aws_access_key_id and aws_secret_access_key without the "
                       "other"));
    }
    credentials.source = absl::StrCat("profile ", files.profile, " (", path, ")");
    return Fetch([credentials] { return credentials; });
  }
  const std::string role_arn = Value(config_section, "role_arn");
  const std::string token_file = Value(config_section, "web_identity_token_file");
  if (!role_arn.empty() && !token_file.empty()) {
    const std::string session = Value(config_section, "role_session_name");
    return Fetch([&http, environment, role_arn, token_file, session] {
      return AssumeRoleWithWebIdentity(http, environment, role_arn, token_file, session);
    });
  }
  for (const std::string key :
       {"credential_process", "sso_session", "sso_start_url", "source_profile"}) {
    if (!Value(config_section, key).empty()) {
      return absl::UnimplementedError(absl::StrCat(
          "AWS profile ", files.profile, " in ", files.config_path, " uses ", key,
          ", which heterodl does not read: give it keys, a web identity, or the environment's"));
    }
  }
  if (files.profile_named) {
    return absl::NotFoundError(absl::StrCat("AWS_PROFILE names profile ", files.profile,
                                            ", which neither ", files.credentials_path, " nor ",
                                            files.config_path, " gives credentials"));
  }
  return absl::NotFoundError(
      absl::StrCat("no profile ", files.profile, " in ",
                   files.credentials_path.empty() ? "~/.aws" : files.credentials_path));
}

// Credentials as JSON from a metadata service: {AccessKeyId,
// SecretAccessKey, Token, Expiration}.
absl::StatusOr<AwsCredentials> ParseCredentialsJson(const std::string& body,
                                                    const std::string& source) {
  const nlohmann::json json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) {
    return absl::InternalError(absl::StrCat(source, ": not JSON: ", body.substr(0, 200)));
  }
  const auto text = [&](const char* key) {
    const auto it = json.find(key);
    return it != json.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  AwsCredentials credentials;
  credentials.access_key_id = text("AccessKeyId");
  credentials.secret_access_key = text("SecretAccessKey");
  credentials.session_token = text("Token");
  credentials.source = source;
  ASSIGN_OR_RETURN(credentials.expiration, ParseExpiration(text("Expiration"), source));
  if (credentials.access_key_id.empty() || credentials.secret_access_key.empty()) {
    return absl::InternalError(absl::StrCat(
        source, ": its answer has no credentials: ", text("Code"), " ", text("Message")));
  }
  return credentials;
}

absl::StatusOr<AwsCredentials> FromContainer(HttpClient& http, const EnvironmentLookup& environment,
                                             absl::Duration timeout) {
  std::string url = Lookup(environment, "AWS_CONTAINER_CREDENTIALS_FULL_URI");
  const std::string relative = Lookup(environment, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  if (!relative.empty()) {
    url = absl::StrCat("http://169.254.170.2", relative);
  }
  if (url.empty()) {
    return absl::NotFoundError("no AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI");
  }
  HttpRequest request;
  request.url = url;
  request.timeout = timeout;
  std::string authorization = Lookup(environment, "AWS_CONTAINER_AUTHORIZATION_TOKEN");
  const std::string token_file = Lookup(environment, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
  if (!token_file.empty()) {
    ASSIGN_OR_RETURN(authorization, ReadFileToString(token_file));
    authorization = std::string(absl::StripAsciiWhitespace(authorization));
  }
  if (!authorization.empty()) {
    request.headers.push_back(absl::StrCat("Authorization: ", authorization));
  }
  const std::string source = absl::StrCat("container credentials (", url, ")");
  ASSIGN_OR_RETURN(const HttpResponse response, http.Send(request));
  if (response.status != 200) {
    return absl::PermissionDeniedError(
        absl::StrCat(source, ": HTTP ", response.status, ": ", response.body.substr(0, 200)));
  }
  return ParseCredentialsJson(response.body, source);
}

absl::StatusOr<AwsCredentials> FromInstanceMetadata(HttpClient& http, const std::string& endpoint,
                                                    absl::Duration timeout) {
  HttpRequest token_request;
  token_request.method = "PUT";
  token_request.url = absl::StrCat(endpoint, "/latest/api/token");
  token_request.headers.push_back("X-aws-ec2-metadata-token-ttl-seconds: 21600");
  token_request.timeout = timeout;
  absl::StatusOr<HttpResponse> token = http.Send(token_request);
  if (!token.ok()) {
    return absl::NotFoundError(absl::StrCat("no instance metadata service at ", endpoint, " (",
                                            token.status().message(), ")"));
  }
  if (token->status != 200) {
    return absl::PermissionDeniedError(absl::StrCat("the instance metadata service at ", endpoint,
                                                    " refused a token: HTTP ", token->status));
  }
  const std::string header = absl::StrCat("X-aws-ec2-metadata-token: ", token->body);
  HttpRequest roles_request;
  roles_request.url = absl::StrCat(endpoint, "/latest/meta-data/iam/security-credentials/");
  roles_request.headers.push_back(header);
  roles_request.timeout = timeout;
  ASSIGN_OR_RETURN(const HttpResponse roles, http.Send(roles_request));
  const std::string role(absl::StripAsciiWhitespace(
      std::vector<std::string>(absl::StrSplit(roles.body, '\n')).front()));
  if (roles.status != 200 || role.empty()) {
    return absl::NotFoundError(
        absl::StrCat("the instance at ", endpoint, " has no IAM role (HTTP ", roles.status, ")"));
  }
  HttpRequest credentials_request = roles_request;
  credentials_request.url = absl::StrCat(roles_request.url, role);
  const std::string source = absl::StrCat("instance metadata (role ", role, ")");
  ASSIGN_OR_RETURN(const HttpResponse credentials, http.Send(credentials_request));
  if (credentials.status != 200) {
    return absl::PermissionDeniedError(
        absl::StrCat(source, ": HTTP ", credentials.status, ": ", credentials.body.substr(0, 200)));
  }
  return ParseCredentialsJson(credentials.body, source);
}

}  // namespace

EnvironmentLookup ProcessEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) {
      return std::nullopt;
    }
    return std::string(value);
  };
}

std::string AwsRegion(const EnvironmentLookup& environment) {
  for (const char* name : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    std::string region = Lookup(environment, name);
    if (!region.empty()) {
      return region;
    }
  }
  absl::StatusOr<std::optional<boost::property_tree::ptree>> config =
      ConfigSection(FindSharedFiles(environment));
  if (!config.ok()) {
    LogWarning("%s; its region is not read", config.status().message());
    return "";
  }
  return *config ? Value(&**config, "region") : "";
}

absl::StatusOr<std::unique_ptr<AwsCredentialChain>> AwsCredentialChain::Create(
    const AwsCredentialOptions& options) {
  HttpClientOptions http_options;
  http_options.connect_timeout = options.metadata_timeout;
  http_options.cancelled = options.cancelled;
  std::unique_ptr<AwsCredentialChain> chain(
      new AwsCredentialChain(options, std::make_unique<HttpClient>(http_options)));
  const EnvironmentLookup environment = chain->options_.environment;
  HttpClient& http = *chain->http_;
  const absl::Duration timeout = chain->options_.metadata_timeout;

  std::vector<std::string> looked;
  // Each source in turn: a Fetch when it is configured.
  const auto found = [&](absl::StatusOr<Fetch> fetch) -> absl::StatusOr<bool> {
    if (absl::IsNotFound(fetch.status())) {
      looked.push_back(std::string(fetch.status().message()));
      return false;
    }
    RETURN_IF_ERROR(fetch.status());
    ASSIGN_OR_RETURN(AwsCredentials credentials, (*fetch)());
    chain->fetch_ = *std::move(fetch);
    absl::MutexLock lock(&chain->mu_);
    chain->current_ = std::move(credentials);
    return true;
  };
  const auto fixed = [](absl::StatusOr<AwsCredentials> credentials) -> absl::StatusOr<Fetch> {
    RETURN_IF_ERROR(credentials.status());
    return Fetch([credentials = *std::move(credentials)] { return credentials; });
  };

  ASSIGN_OR_RETURN(bool done, found(fixed(FromEnvironment(environment))));
  if (!done) {
    ASSIGN_OR_RETURN(done, found(FromSharedFiles(http, environment)));
  }
  if (!done) {
    const std::string role_arn = Lookup(environment, "AWS_ROLE_ARN");
    const std::string token_file = Lookup(environment, "AWS_WEB_IDENTITY_TOKEN_FILE");
    const std::string session = Lookup(environment, "AWS_ROLE_SESSION_NAME");
    absl::StatusOr<Fetch> web_identity =
        absl::NotFoundError("no AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN");
    if (!role_arn.empty() && !token_file.empty()) {
      web_identity = Fetch([&http, environment, role_arn, token_file, session] {
        return AssumeRoleWithWebIdentity(http, environment, role_arn, token_file, session);
      });
    }
    ASSIGN_OR_RETURN(done, found(std::move(web_identity)));
  }
  if (!done) {
    absl::StatusOr<Fetch> container =
        absl::NotFoundError("no AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI");
    if (environment("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") ||
        environment("AWS_CONTAINER_CREDENTIALS_FULL_URI")) {
      container = Fetch(
          [&http, environment, timeout] { return FromContainer(http, environment, timeout); });
    }
    ASSIGN_OR_RETURN(done, found(std::move(container)));
  }
  if (!done) {
    absl::StatusOr<Fetch> metadata = absl::NotFoundError("AWS_EC2_METADATA_DISABLED");
    if (absl::AsciiStrToLower(Lookup(environment, "AWS_EC2_METADATA_DISABLED")) != "true") {
      std::string endpoint = Lookup(environment, "AWS_EC2_METADATA_SERVICE_ENDPOINT");
      if (endpoint.empty()) {
        endpoint = "http://169.254.169.254";
      }
      endpoint = std::string(absl::StripSuffix(endpoint, "/"));
      // The first fetch tells whether the service is there: NOT_FOUND if not.
      absl::StatusOr<AwsCredentials> first = FromInstanceMetadata(http, endpoint, timeout);
      if (absl::IsNotFound(first.status())) {
        metadata = first.status();
      } else {
        RETURN_IF_ERROR(first.status());
        metadata = Fetch([&http, endpoint, timeout, first = *std::move(first),
                          used = false]() mutable -> absl::StatusOr<AwsCredentials> {
          if (!used) {
            used = true;
            return first;
          }
          return FromInstanceMetadata(http, endpoint, timeout);
        });
      }
    }
    ASSIGN_OR_RETURN(done, found(std::move(metadata)));
  }
  if (!done) {
    return absl::NotFoundError(absl::StrCat("no AWS credentials: ", absl::StrJoin(looked, "; "),
                                            " (the places the AWS SDKs look, in their order)"));
  }
  {
    absl::MutexLock lock(&chain->mu_);
    LogInfo("AWS credentials from %s", chain->current_.source);
  }
  return chain;
}

AwsCredentialChain::~AwsCredentialChain() = default;

absl::StatusOr<AwsCredentials> AwsCredentialChain::Get() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  if (current_.expiration - options_.refresh_margin > now ||
      (current_.expiration > now && now < retry_after_)) {
    return current_;
  }
  // Renewed under the lock: the other threads wait for the new ones rather
  // than each asking the service.
  absl::StatusOr<AwsCredentials> renewed = fetch_();
  if (renewed.ok()) {
    LogInfo("AWS credentials from %s renewed (they expire %s)", renewed->source,
            absl::FormatTime(renewed->expiration));
    current_ = *std::move(renewed);
    return current_;
  }
  retry_after_ = now + absl::Seconds(10);
  if (current_.expiration > now) {
    LogWarning("cannot renew the AWS credentials from %s yet (%s); the current ones serve",
               current_.source, renewed.status().message());
    return current_;
  }
  return absl::UnauthenticatedError(
      absl::StrCat("the AWS credentials from ", current_.source,
                   " expired and cannot be renewed: ", renewed.status().message()));
}

}  // namespace heterodl
