// GrpcDataServer: a data server's life: listening (gRPC, and the pixel
// channels' listener it was given), waiting for a reason to stop (a
// Shutdown call, a signal, no client for too long), then draining: open
// streams send the batches being built and end, handing back the rest, and
// those still writing after a grace are cancelled. What is served is the
// BatchService's; the RPCs are DataServiceHandlers'. DataServer::Start
// (src/server/data_server.h) opens the dataset and makes one.
#ifndef HETERODL_SRC_SERVER_GRPC_DATA_SERVER_H_
#define HETERODL_SRC_SERVER_GRPC_DATA_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "src/server/activity_monitor.h"
#include "src/server/batch_service.h"
#include "src/server/data_server.h"
#include "src/server/data_service_handlers.h"
#include "src/server/pixel_channel_listener.h"

namespace heterodl {

class GrpcDataServer final : public DataServer {
 public:
  // `pixel_listener` null: no pixel channels. `cancel_reads` (may be
  // null): set once the server has stopped serving, so that reads the
  // service's workers still wait on (object storage) end at once.
  GrpcDataServer(const DataServerOptions& options,
                 std::unique_ptr<PixelChannelListener> pixel_listener,
                 std::unique_ptr<BatchService> service,
                 std::shared_ptr<std::atomic<bool>> cancel_reads = nullptr);

  // Starts serving on options.address: UNAVAILABLE saying why bind(2)
  // failed (a port in use, an address not on this host).
  absl::Status Listen();

  // DataServer.
  int port() const override { return port_; }
  void RequestStop(const std::string& reason) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Wait() override ABSL_LOCKS_EXCLUDED(mu_);
  v1::ServerStats Stats() override { return handlers_.CurrentStats(); }

 private:
  // Blocks until a stop is requested or the activity monitor times out;
  // the reason.
  std::string AwaitStopReason() ABSL_LOCKS_EXCLUDED(mu_);

  const DataServerOptions options_;
  ActivityMonitor activity_;
  // Outlives the service, whose dataset's reads check it.
  const std::shared_ptr<std::atomic<bool>> cancel_reads_;
  // Outlives the streams and the worker pool, which send on its channels.
  const std::unique_ptr<PixelChannelListener> pixel_listener_;
  const std::unique_ptr<BatchService> service_;
  DataServiceHandlers handlers_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;

  absl::Mutex mu_;
  std::string stop_reason_ ABSL_GUARDED_BY(mu_);
};

}  // namespace heterodl

#endif  // HETERODL_SRC_SERVER_GRPC_DATA_SERVER_H_
