// ByteStream: a client bidi-streaming call of raw byte buffers, driven with
// blocking calls like gRPC's sync ClientReaderWriter.
//
// The sync API only speaks the generated message types, and its protobuf
// parse would copy each batch's pixels into a string; through a generic
// (byte buffer) call the loader decodes batches itself (batch_codec.h).
//
//   grpc::GenericStub stub(channel);
//   ByteStream stream(stub, &context, "/heterodl.v1.DataService/StreamBatches");
//   stream.Write(request);
//   while (stream.Read(&buffer)) ...;
//   grpc::Status status = stream.Finish();
//
// One thread uses a ByteStream at a time (reads and writes alternate).
// Cancelling the context (from any thread) makes blocked calls return false.
#ifndef HETERODL_SRC_WIRE_BYTE_STREAM_H_
#define HETERODL_SRC_WIRE_BYTE_STREAM_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

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

  // False when the stream is broken or finished: Finish() says why.
  bool Write(const grpc::ByteBuffer& message) ABSL_LOCKS_EXCLUDED(mu_);
  // False at the end of the stream or when it is broken.
  bool Read(grpc::ByteBuffer* message) ABSL_LOCKS_EXCLUDED(mu_);
  // Half-closes the stream: the server sees the end of the requests.
  void WritesDone() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits for the server's status.
  grpc::Status Finish() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Waits for the operation just started; returns whether it succeeded.
  bool AwaitOperation() ABSL_LOCKS_EXCLUDED(mu_);
  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnReadDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnWritesDoneDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnDone(const grpc::Status& status) override ABSL_LOCKS_EXCLUDED(mu_);

  grpc::ClientContext* const context_;
  // Set by the owner thread once Finish() let gRPC end the call.
  bool hold_released_ = false;
  absl::Mutex mu_;
  // The operation in progress (at most one: callers are sequential).
  bool operation_pending_ ABSL_GUARDED_BY(mu_) = false;
  // Whether the last operation succeeded.
  bool operation_ok_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace heterodl

#endif  // HETERODL_SRC_WIRE_BYTE_STREAM_H_
