// ByteStream: a client bidi-streaming call of raw byte buffers: messages are
// sent from any thread without waiting, and read with blocking calls.
//
// The sync API only speaks the generated message types, and its protobuf
// parse would copy each batch's pixels into a string; through a generic
// (byte buffer) call the loader decodes batches itself (batch_codec.h).
// Sends do not block because a loader sends requests from whichever thread
// frees a credit (the trainer's, taking a batch) while the stream's own
// thread waits in Read for the next batch.
//
//   grpc::GenericStub stub(channel);
//   ByteStream stream(stub, &context, "/heterodl.v1.DataService/StreamBatches");
//   stream.Send(request);                      // queued, in order
//   while (stream.Read(&buffer)) ...;
//   grpc::Status status = stream.Finish();
//
// Cancelling the context (from any thread) makes a blocked Read return false.
#ifndef HETERODL_SRC_RPC_BYTE_STREAM_H_
#define HETERODL_SRC_RPC_BYTE_STREAM_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <deque>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace heterodl {

class ByteStream final : private grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // Starts the call at once.
  ByteStream(grpc::GenericStub& stub, grpc::ClientContext* context, const std::string& method);
  // Cancels the call unless it has finished, and waits for gRPC to be done
  // with it.
  ~ByteStream() override;
  ByteStream(const ByteStream&) = delete;
  ByteStream& operator=(const ByteStream&) = delete;

  // Queues `message` behind the ones sent before; gRPC writes them in
  // order. False when the stream already broke (or was half-closed), then
  // Finish() says why. Thread-safe, never blocks on the network.
  bool Send(grpc::ByteBuffer message) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits for the next message. False at the end of the stream or when it
  // is broken. One thread reads at a time.
  bool Read(grpc::ByteBuffer* message) ABSL_LOCKS_EXCLUDED(mu_);
  // Half-closes the stream once everything sent is written: the server sees
  // the end of the requests. Later Sends fail.
  void WritesDone() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits for the server's status. Call once, after the last Read.
  grpc::Status Finish() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Starts the next queued write (or the half-close), if none is running.
  // Called without mu_: gRPC may run OnWriteDone inline. `in_reaction`:
  // called from OnWriteDone, where an operation may still be started after
  // Finish() released the call (gRPC cannot have ended it meanwhile).
  void StartNextWrite(bool in_reaction) ABSL_LOCKS_EXCLUDED(mu_);
  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnReadDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnWritesDoneDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnDone(const grpc::Status& status) override ABSL_LOCKS_EXCLUDED(mu_);

  grpc::ClientContext* const context_;
  absl::Mutex mu_;
  // Set once Finish() let gRPC end the call.
  bool hold_released_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<grpc::ByteBuffer> to_write_ ABSL_GUARDED_BY(mu_);
  // The message gRPC is writing (it must stay alive until OnWriteDone).
  grpc::ByteBuffer writing_ ABSL_GUARDED_BY(mu_);
  bool write_running_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_broken_ ABSL_GUARDED_BY(mu_) = false;
  bool half_close_wanted_ ABSL_GUARDED_BY(mu_) = false;
  bool half_close_started_ ABSL_GUARDED_BY(mu_) = false;
  bool read_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool read_ok_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace heterodl

#endif  // HETERODL_SRC_RPC_BYTE_STREAM_H_
