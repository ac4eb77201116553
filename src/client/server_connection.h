// ServerConnection: one of the loader's connections to a data server. It
// owns the connection's gRPC channel, its open stream (context, call, pixel
// transport) and the backoff between streams; the loader owns the decisions
// (which batches to ask for, what a batch must be, whether to go on), told
// through ConnectionEvents.
//
//   ServerConnection connection(c, "algo-2:50051", channels.Open(address, 1), settings);
//   connection.Start(loader);          // a thread opens streams until Close()
//   connection.Send(request);          // from the loader, under its lock
//   connection.CancelStream();         // a stalled stream: its batches go elsewhere
//   connection.Close();                // for good (the loader goes, the server is unlisted)
//
// Each stream begins by asking the server's DatasetInfo (its limits and
// pixel offer now: a restarted server may differ, and one serving another
// dataset is not used), chooses how pixels travel (src/client/pixel_transport.h),
// sends the open request, then reads batches: each header is admitted by
// the loader before a byte of its pixels is read.
#ifndef HETERODL_SRC_CLIENT_SERVER_CONNECTION_H_
#define HETERODL_SRC_CLIENT_SERVER_CONNECTION_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "heterodl/data_service.grpc.pb.h"
#include "src/client/pixel_transport.h"
#include "src/common/memory/buffer_pool.h"
#include "src/rpc/byte_stream.h"
#include "src/wire/batch_codec.h"

namespace heterodl {

// What every connection of a loader shares, constant for its life.
struct ConnectionSettings {
  std::string auth_token;
  // The job's dataset: a server with another is not used.
  uint64_t fingerprint = 0;
  // What each stream's open request carries.
  v1::PlanConfig plan;
  // The fields of its batches, as the servers declared them (checked).
  google::protobuf::RepeatedPtrField<v1::FieldSpec> fields;
  // They are a user's own Python dataset's (DatasetInfo.sample_structure).
  bool user_fields = false;
  std::string client_id;
  // Batches larger than this are refused before they are allocated.
  uint64_t max_batch_bytes = 0;
  PixelTransportPolicy pixels;
  // Where received pixels go.
  std::shared_ptr<BufferPool> pool;
};

// What a server lets one stream have outstanding.
struct StreamLimits {
  uint32_t max_batches = 64;
  uint64_t max_bytes = 0;  // 0: no byte limit told
};

// How a stream ended.
struct StreamEnd {
  absl::Status status;  // never OK
  // A batch came through it.
  bool delivered = false;
  // Its server serves another dataset.
  bool incompatible = false;
  // Its server ended it because it is leaving (SIGTERM).
  bool left = false;
  // The longest the connection waits now before its next stream.
  absl::Duration retry_every = absl::Seconds(5);
};

// What a connection's thread tells its loader, never with the connection's
// lock held (so the loader may call back into it under its own lock).
class ConnectionEvents {
 public:
  virtual ~ConnectionEvents() = default;

  // A stream is opening and the server told its limits.
  virtual void LimitsKnown(int connection, const StreamLimits& limits) = 0;
  // The stream is open and takes requests (Send).
  virtual void StreamOpened(int connection) = 0;
  // A batch's header arrived: OK with the bytes of pixels its plan makes
  // when this connection was asked for it. An error ends the stream.
  virtual absl::StatusOr<uint64_t> Admit(int connection, const v1::Batch& header) = 0;
  // A batch arrived whole (its pixels in `batch.pixels`).
  virtual void Received(int connection, DecodedBatch batch) = 0;
  // The stream ended: true to open another after the backoff.
  virtual bool StreamEnded(int connection, const StreamEnd& end) = 0;
};

class ServerConnection {
 public:
  // `number`: how the loader (and its FeedSchedule) numbers the connection.
  ServerConnection(int number, std::string address, const std::shared_ptr<grpc::Channel>& channel,
                   std::shared_ptr<const ConnectionSettings> settings);
  // Closes and joins.
  ~ServerConnection();
  ServerConnection(const ServerConnection&) = delete;
  ServerConnection& operator=(const ServerConnection&) = delete;

  // Starts the thread that opens streams, one after another with backoff,
  // until Close() or `events` says no more. Once.
  void Start(ConnectionEvents& events) ABSL_LOCKS_EXCLUDED(mu_);
  // Asks for a batch on the open stream. False when none is open, or it
  // broke: its reader then sees the break, and the loader gives the batch
  // to another connection. Never blocks on the network.
  bool Send(const v1::BatchRequest& request) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the open stream (a stalled one); the next opens after the backoff.
  void CancelStream() ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the open stream and opens no more; wakes the thread wherever it
  // waits. Any thread, any number of times.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits for the thread to end (after Close(), or the loader said no more).
  void Join();

  // One DatasetInfo call on this connection (the loader's first handshake).
  grpc::Status GetDatasetInfo(grpc::ClientContext* context, const v1::DatasetInfoRequest& request,
                              v1::DatasetInfo* info) const;

  int number() const { return number_; }
  const std::string& address() const { return address_; }
  // A stream is open and takes requests. Once it is no longer, the loader
  // hears of it (StreamEnded) after this turned false.
  bool streaming() const ABSL_LOCKS_EXCLUDED(mu_);
  // The open stream's pixels come through the server's shared memory.
  bool same_host() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Streams, one after another, until closed or the loader says no more.
  void Run(ConnectionEvents& events);
  // One stream, open until it breaks or the connection closes.
  StreamEnd RunStream(ConnectionEvents& events);
  // Reads batches off the stream (their pixels off `pixels`) until it ends:
  // ABORTED when the server or the network ended it.
  absl::Status ReadBatches(ConnectionEvents& events, ByteStream& stream, PixelTransport& pixels,
                           bool& delivered);
  // Makes the open call reachable by Send, CancelStream and Close; false
  // when the connection is closed (then the call is not to be made).
  bool Expose(grpc::ClientContext* context, ByteStream* stream, PixelTransport* pixels)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Hide() ABSL_LOCKS_EXCLUDED(mu_) { Expose(nullptr, nullptr, nullptr); }
  void CancelLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int number_;
  const std::string address_;
  const std::shared_ptr<const ConnectionSettings> settings_;
  const std::unique_ptr<v1::DataService::Stub> stub_;
  // StreamBatches as a raw call: batches are decoded by batch_codec.h.
  const std::unique_ptr<grpc::GenericStub> stream_stub_;
  // Only the connection's thread uses it.
  PixelTransportSelector pixel_selector_;
  std::thread thread_;

  mutable absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // The open call, while there is one.
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  ByteStream* stream_ ABSL_GUARDED_BY(mu_) = nullptr;  // once its open request is sent
  PixelTransport* pixels_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_CLIENT_SERVER_CONNECTION_H_
