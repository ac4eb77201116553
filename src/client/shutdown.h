// ShutdownDataServers: how the dnn group's leader ends the data group when
// training ends, so that no data host keeps billing.
//
//   RETURN_IF_ERROR(ShutdownDataServers(view.data_servers, "training finished",
//                                       absl::Seconds(10), token, tls));
#ifndef HETERODL_SRC_CLIENT_SHUTDOWN_H_
#define HETERODL_SRC_CLIENT_SHUTDOWN_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "src/common/net/tls_config.h"

namespace heterodl {

// Tells every data server to shut down (with `auth_token` when the servers
// require one) and waits for each to acknowledge, all at once, retrying
// until `deadline`. A server whose port refuses connections has gone
// already and counts as stopped. Returns an error naming the servers that
// did not acknowledge (unreachable, or refusing the request).
absl::Status ShutdownDataServers(const std::vector<std::string>& servers, const std::string& reason,
                                 absl::Duration deadline, const std::string& auth_token = "",
                                 const TlsConfig& tls = {});

}  // namespace heterodl

#endif  // HETERODL_SRC_CLIENT_SHUTDOWN_H_
