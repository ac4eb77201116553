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
#include "heterodl/data_service.pb.h"
#include "src/common/net/tls_config.h"
#include "src/data/python/python_dataset.h"

namespace heterodl {

struct DataServerOptions {
  std::string dataset;
  // A user's own Python dataset instead (python.worker.dataset non-empty:
  // serve --python-dataset MODULE:CALLABLE): its samples are made by worker
  // processes (src/data/python/python_dataset.h); `dataset`, `pipeline`
  // and the decoding options do not apply.
  PythonDatasetOptions python;
  // > 0: serve this many synthetic samples instead of `dataset` (no files,
  // no decoding), to measure the transport alone.
  int64_t synthetic_samples = 0;
  std::string pipeline;                   // empty: kDefaultPipeline
  std::string address = "0.0.0.0:50051";  // host:port; port 0 picks one
  int threads = 0;                        // 0: one per core
  // Decode threads run this much nicer than the rest (0 to 19): where a
  // trainer shares the host, its threads, the loader's and the server's
  // sender get the cores first, and the decoders take all that is left.
  int worker_nice = 10;
  // Images whose header claims more pixels are refused (and replaced).
  int64_t max_pixels = 100'000'000;
  // A sample file (or tar member) over this is a bad sample, refused before
  // it is read; so is a path that is not a regular file (DatasetLimits).
  uint64_t max_file_bytes = uint64_t{256} << 20;
  // Non-empty: sample files must lie beneath it (DatasetLimits::root).
  std::string dataset_root;
  // A COCO annotations file's images (DatasetLimits::image_root).
  std::string image_root;
  // Its boxes less visible than this after the crops are dropped
  // (PipelineOptions::min_box_visibility).
  double min_box_visibility = 0.0;
  // Replace samples whose JPEG data is damaged but decodable instead of
  // decoding them as libjpeg fills them (PipelineOptions::strict_decode).
  bool strict_decode = false;
  // A segmentation dataset's masks: the class id of pixels no image pixel
  // maps to (PipelineOptions::mask_ignore_index); 0-255 for 8-bit masks,
  // 0-65535 for 16-bit ones, else Start refuses.
  int mask_ignore_index = 255;
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
  // Streams open at once, over all clients; more are refused with
  // RESOURCE_EXHAUSTED (a loader opens one per connection, 2 by default).
  int max_streams = 256;
  // A stream call that has not sent its open request this long after it
  // began is ended (DEADLINE_EXCEEDED). Until then it holds no stream slot;
  // at most 4 x max_streams such calls wait at once.
  absl::Duration open_timeout = absl::Seconds(5);
  // Streams open at once from one host (all connections from one address:
  // a machine, a NAT, loopback); 0: half of max_streams. One client cannot
  // hold every slot.
  int max_streams_per_host = 0;
  // Bytes of batches one stream may have requested and not yet received: a
  // client that asks and never reads holds at most this much server memory.
  uint64_t max_stream_bytes = 2ull << 30;
  // Bytes of batches all streams together may have requested and not yet
  // received (MemoryBudget): a batch that would pass it waits; one larger
  // than it alone is refused (RESOURCE_EXHAUSTED). 0: half of the memory of
  // this machine or container (DefaultMemoryBudgetBytes).
  uint64_t max_memory_bytes = 0;
  // While batches wait for that budget, a stream whose built batches have
  // waited this long unread is ended (StreamPolicy::unread_timeout).
  absl::Duration unread_timeout = absl::Seconds(30);
  // A pipeline whose estimated work per sample passes this many pixel
  // operations is refused, naming its costliest operation (PipelineCost;
  // --pipeline too, at start).
  double max_sample_pixel_operations = 2e9;
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
