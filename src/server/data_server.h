// DataServer: the data-group process's gRPC server. Serves the DataService of
// proto/heterodl/data_service.proto over a BatchService, and ends on a
// Shutdown RPC from the dnn leader, on RequestStop() (signals), or on its own
// idle / startup timeouts.
//
//   DataServerOptions options;
//   options.dataset = "/data/train";
//   options.address = "127.0.0.1:0";
//   ASSIGN_OR_RETURN(std::unique_ptr<DataServer> server, DataServer::Start(options));
//   LogInfo("listening on port %d", server->port());
//   absl::Status ended = server->Wait();   // returns after an orderly stop
#ifndef HETERODL_SRC_SERVER_DATA_SERVER_H_
#define HETERODL_SRC_SERVER_DATA_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "augment/pipeline.h"
#include "heterodl/data_service.pb.h"
#include "src/common/net/tls_config.h"
#include "src/data/dataset.h"
#include "src/data/python/python_dataset.h"
#include "src/server/batch_service.h"
#include "src/server/stream_policy.h"

namespace heterodl {

struct DataServerOptions {
  std::string dataset;
  // A user's own Python dataset instead (python.worker.dataset non-empty:
  // serve --python-dataset MODULE:CALLABLE): its samples are made by worker
  // processes (src/data/python/python_dataset.h); `dataset`, `pipeline`,
  // `decoding` and `files` do not apply.
  PythonDatasetOptions python;
  // > 0: serve this many synthetic samples instead of `dataset` (no files,
  // no decoding), to measure the transport alone.
  int64_t synthetic_samples = 0;
  std::string pipeline;  // empty: kDefaultPipeline
  // How every pipeline decodes and moves samples (the one given and the
  // ones streams name): the pixel limit, strict decoding, the masks' ignore
  // index (0-255 for 8-bit masks, 0-65535 for 16-bit ones, else Start
  // refuses), the boxes' visibility.
  PipelineOptions decoding;
  // What a sample read may be: its size, where it must lie, a COCO file's
  // image root (and the masks' ignore index again, which is no class).
  DatasetLimits files;
  // What one client may ask for (sizes, a pipeline's cost per sample) and
  // what all of them may hold (the memory budget; 0: half of the memory of
  // this machine or container, DefaultMemoryBudgetBytes).
  RequestLimits requests;
  // How many streams, from where, holding how much (StreamPolicy;
  // max_streams_per_host 0: half of max_streams; max_unopened_calls: set
  // from max_streams by Start).
  StreamPolicy streams;
  std::string address = "0.0.0.0:50051";  // host:port; port 0 picks one
  int threads = 0;                        // 0: one per core
  // Decode threads run this much nicer than the rest (0 to 19): where a
  // trainer shares the host, its threads, the loader's and the server's
  // sender get the cores first, and the decoders take all that is left.
  int worker_nice = 10;
  // A file list naming files that do not exist: false logs how many (and the
  // first few) and serves, replacing their samples as any unreadable one;
  // true refuses to start (FAILED_PRECONDITION).
  bool strict_dataset = false;
  // Non-empty: every RPC must carry this token (kAuthTokenMetadataKey), or
  // it is refused with UNAUTHENTICATED.
  std::string auth_token;
  // TLS (mutual with a CA); empty: plaintext.
  TlsConfig tls;
  // Stop when no stream has been open for this long (after the first client).
  absl::Duration idle_timeout = absl::Minutes(10);
  // Stop when no client has come for this long after start.
  absl::Duration startup_timeout = absl::Minutes(30);
  // TCP port for pixel channels (src/wire/pixel_channel.h) on the host of
  // `address`: 0 picks a free one, -1 turns them off (pixels then go through
  // gRPC, as they always do under TLS). Loaders learn it from DatasetInfo.
  int pixel_port = 0;
  // With pixel channels on: build batches in shared memory and let loaders
  // on this host copy them from there (src/wire/pixel_channel.h, "Same
  // host") instead of through a socket.
  bool same_host_pixels = true;
  // Grace given to open streams on shutdown before they are cancelled.
  absl::Duration drain_timeout = absl::Seconds(3);
};

class DataServer {
 public:
  // Opens the dataset, parses the pipeline and starts listening. Errors name
  // the dataset path, the pipeline problem or the address that cannot be
  // bound.
  static absl::StatusOr<std::unique_ptr<DataServer>> Start(const DataServerOptions& options);
  virtual ~DataServer() = default;

  // The bound port (useful with port 0).
  virtual int port() const = 0;
  // Begins an orderly stop; Wait() returns once it is done. Thread-safe,
  // idempotent.
  virtual void RequestStop(const std::string& reason) = 0;
  // Blocks until the server has stopped. OK for an orderly stop (Shutdown
  // RPC, RequestStop, idle or startup timeout).
  virtual absl::Status Wait() = 0;
  // What GetStats answers, for the server's own metrics endpoint.
  // Thread-safe.
  virtual v1::ServerStats Stats() = 0;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_SERVER_DATA_SERVER_H_
