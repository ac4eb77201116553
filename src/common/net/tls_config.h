// TlsConfig: which PEM files secure the data service's connections
// (`--tls-cert`, `--tls-key`, `--tls-ca`). A plain struct, free of gRPC, so
// option structs everywhere (the trainer's included) can carry it;
// src/rpc/credentials.h turns it into gRPC credentials.
//
// Server: TLS with cert + key; with a CA too, clients must present a
// certificate it signed (mutual TLS). Client: TLS when a CA is given (the
// server's certificate is verified against it); with cert + key it presents
// them. Nothing given: plaintext, as before.
#ifndef HETERODL_SRC_COMMON_NET_TLS_CONFIG_H_
#define HETERODL_SRC_COMMON_NET_TLS_CONFIG_H_

#include <string>

namespace heterodl {

struct TlsConfig {
  std::string cert_file;  // this side's certificate chain (PEM)
  std::string key_file;   // its private key (PEM)
  std::string ca_file;    // the CA that signed the other side's certificate
  // Client only: the name to verify in the server's certificate when it is
  // not the address's host (servers addressed by IP).
  std::string server_name;

  bool enabled() const { return !cert_file.empty() || !key_file.empty() || !ca_file.empty(); }
};

}  // namespace heterodl

#endif  // HETERODL_SRC_COMMON_NET_TLS_CONFIG_H_
