// The loader's first handshake with its servers: which servers are listed,
// and which dataset they agree to serve. Everything after (the epoch plan,
// the batch shape) follows from the DatasetInfo agreed here.
//
//   ASSIGN_OR_RETURN(std::vector<std::string> servers, FirstServers(discovery, options));
//   ... one ServerConnection per server ...
//   ASSIGN_OR_RETURN(v1::DatasetInfo info, AgreeOnDataset(first_connections, options));
#ifndef HETERODL_SRC_CLIENT_DATASET_HANDSHAKE_H_
#define HETERODL_SRC_CLIENT_DATASET_HANDSHAKE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "heterodl/data_service.pb.h"
#include "src/client/remote_loader.h"
#include "src/client/server_connection.h"
#include "src/client/server_discovery.h"

namespace heterodl {

// The servers listed when the loader starts. With a servers file or a DNS
// name that list none yet (the data group is still starting), waits up to
// options.connect_timeout for one: UNAVAILABLE naming the sources after
// that, CANCELLED when options.interrupt_connect says so.
absl::StatusOr<std::vector<std::string>> FirstServers(ServerDiscovery& discovery,
                                                      const RemoteLoaderOptions& options);

// Asks every server (one connection each) for its DatasetInfo at once, with
// options.pipeline, retrying each within options.connect_timeout; why a
// server does not answer is said once per new reason. Once one answers, the
// others get a short grace and are otherwise used when they come up (with a
// warning). Returns the first answer when every answer names the same
// dataset; fails naming both sides of a mismatch, at once on an answer no
// retry changes (a wrong token, a pipeline the server cannot parse, a port
// that is no data server's), UNAVAILABLE naming every server when none
// answered, CANCELLED when options.interrupt_connect says so.
absl::StatusOr<v1::DatasetInfo> AgreeOnDataset(const std::vector<const ServerConnection*>& servers,
                                               const RemoteLoaderOptions& options);

// The fields of the servers' batches (DatasetInfo.fields), checked
// (FAILED_PRECONDITION saying why not). A server from before the batch
// contract declares none: its batches are images alone. The loader hands out
// images alone, images and their masks, images and their objects, or the
// groups of views of a multi-view pipeline (Batch), or whatever a user's own
// Python dataset's samples hold (DatasetInfo.sample_structure): UNIMPLEMENTED
// naming the fields of a pipeline that makes others.
absl::StatusOr<google::protobuf::RepeatedPtrField<v1::FieldSpec>> BatchFieldsOf(
    const v1::DatasetInfo& info);

}  // namespace heterodl

#endif  // HETERODL_SRC_CLIENT_DATASET_HANDSHAKE_H_
