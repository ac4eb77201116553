#include "src/rpc/credentials.h"

#include <grpcpp/security/server_credentials.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/common/read_file.h"
#include "src/common/status_macros.h"

namespace heterodl {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("TLS ", what, ": ", text.status().message()));
  }
  if (text->find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS ", what, " '", path, "' is not a PEM file"));
  }
  return text;
}

absl::Status CheckPair(const TlsConfig& tls) {
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together: give both or neither");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsConfig& tls) {
  if (!tls.enabled()) {
    return grpc::InsecureServerCredentials();
  }
  RETURN_IF_ERROR(CheckPair(tls));
  if (tls.cert_file.empty()) {
    return absl::InvalidArgumentError("a TLS server needs --tls-cert and --tls-key");
  }
  grpc::SslServerCredentialsOptions options;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.cert_chain, ReadPem(tls.cert_file, "certificate"));
  ASSIGN_OR_RETURN(pair.private_key, ReadPem(tls.key_file, "key"));
  options.pem_key_cert_pairs.push_back(std::move(pair));
  if (!tls.ca_file.empty()) {
    ASSIGN_OR_RETURN(options.pem_root_certs, ReadPem(tls.ca_file, "CA"));
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsConfig& tls) {
  if (!tls.enabled()) {
    return grpc::InsecureChannelCredentials();
  }
  RETURN_IF_ERROR(CheckPair(tls));
  grpc::SslCredentialsOptions options;
  if (!tls.ca_file.empty()) {
    ASSIGN_OR_RETURN(options.pem_root_certs, ReadPem(tls.ca_file, "CA"));
  }
  if (!tls.cert_file.empty()) {
    ASSIGN_OR_RETURN(options.pem_cert_chain, ReadPem(tls.cert_file, "certificate"));
    ASSIGN_OR_RETURN(options.pem_private_key, ReadPem(tls.key_file, "key"));
  }
  return grpc::SslCredentials(options);
}

void AddTlsChannelArguments(const TlsConfig& tls, grpc::ChannelArguments& arguments) {
  if (tls.enabled() && !tls.server_name.empty()) {
    arguments.SetSslTargetNameOverride(tls.server_name);
  }
}

}  // namespace heterodl
