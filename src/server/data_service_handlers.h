// DataServiceHandlers: the DataService RPCs (proto/heterodl/data_service.proto)
// as gRPC callback handlers: each call is authenticated (the server's token,
// compared in constant time), refused once the server is leaving, and
// handed to the BatchService (what is served) or a BatchStreamReactor (one
// stream of batches). Start, drain and stop are the server's
// (src/server/grpc_data_server.h).
#ifndef HETERODL_SRC_SERVER_DATA_SERVICE_HANDLERS_H_
#define HETERODL_SRC_SERVER_DATA_SERVICE_HANDLERS_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <string>

#include "absl/time/clock.h"
#include "heterodl/data_service.grpc.pb.h"
#include "src/server/activity_monitor.h"
#include "src/server/batch_service.h"
#include "src/server/batch_stream_reactor.h"
#include "src/server/pixel_channel_listener.h"
#include "src/server/refusal_log.h"

namespace heterodl {

// The callback service with StreamBatches raw (byte buffers, see
// BatchStreamReactor).
using DataServiceBase = v1::DataService::WithCallbackMethod_GetDatasetInfo<
    v1::DataService::WithRawCallbackMethod_StreamBatches<
        v1::DataService::WithCallbackMethod_GetStats<
            v1::DataService::WithCallbackMethod_Shutdown<v1::DataService::Service>>>>;

class DataServiceHandlers final : public DataServiceBase {
 public:
  // `auth_token` empty: no token required. `pixel_listener` null: no pixel
  // channels. `request_stop`: what a Shutdown call asks of the server.
  DataServiceHandlers(BatchService& service, ActivityMonitor& activity,
                      PixelChannelListener* pixel_listener, std::string auth_token,
                      StreamPolicy policy, std::function<void(const std::string&)> request_stop);

  // Every open stream sends what it has built and ends; new ones, and
  // loaders asking what this server serves, are refused from now on.
  void Leave(const std::string& reason) { open_streams_.LeaveAll(reason); }
  // Ends the stream calls that have not sent their open request within the
  // policy's open_timeout. Called now and then (the server's wait loop).
  // Run every few hundred milliseconds: ends the calls that never opened
  // within the open timeout and, while batches have waited for the memory
  // budget for a second, the stream holding the most batches unread for
  // longer than the unread timeout (one per run).
  void Housekeep();
  // What GetStats answers, without the token check: the server's own
  // metrics endpoint asks. Thread-safe.
  v1::ServerStats CurrentStats();

  grpc::ServerUnaryReactor* GetDatasetInfo(grpc::CallbackServerContext* context,
                                           const v1::DatasetInfoRequest* request,
                                           v1::DatasetInfo* info) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StreamBatches(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* context,
                                     const v1::StatsRequest* request,
                                     v1::ServerStats* stats) override;
  grpc::ServerUnaryReactor* Shutdown(grpc::CallbackServerContext* context,
                                     const v1::ShutdownRequest* request,
                                     v1::ShutdownResponse* response) override;

 private:
  // UNAUTHENTICATED unless the call carries the server's token (when it has
  // one), compared in constant time.
  // Refusals are counted and logged at a bounded rate.
  grpc::Status Authorize(const grpc::CallbackServerContext& context);
  // UNAVAILABLE naming why, once the server is leaving.
  grpc::Status RefuseIfLeaving() const;

  BatchService& service_;
  ActivityMonitor& activity_;
  PixelChannelListener* const pixel_listener_;
  const std::string auth_token_;
  const StreamPolicy policy_;
  const std::function<void(const std::string&)> request_stop_;
  OpenStreams open_streams_;
  RefusalLog refusals_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_SERVER_DATA_SERVICE_HANDLERS_H_
