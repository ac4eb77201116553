// The data plane's encoding of a batch, with no copy of the pixels on the
// server and one on the client.
//
// On the wire an encoded batch is an ordinary v1::Batch message (any protobuf
// client can parse it): the small fields, then field `images`, whose bytes
// are the server's batch buffer itself, referenced by a grpc::Slice rather
// than copied into a serialized string. The client walks the message with
// protobuf's CodedInputStream and copies the pixels straight from gRPC's
// receive slices into a buffer of its pool (pinned memory on a CUDA trainer).
//
//   grpc::ByteBuffer wire =
//       EncodeBatch(header, OutgoingPixels::Own(std::move(buffer)));  // server
//   ASSIGN_OR_RETURN(DecodedBatch batch, DecodeBatch(wire, *pool));   // client
#ifndef HETERODL_SRC_WIRE_BATCH_CODEC_H_
#define HETERODL_SRC_WIRE_BATCH_CODEC_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "heterodl/data_service.pb.h"
#include "src/common/memory/buffer_pool.h"
#include "src/wire/outgoing_pixels.h"

namespace heterodl {

// A v1::Batch with `images` held apart.
struct DecodedBatch {
  v1::Batch header;  // `images` empty
  PooledBuffer pixels;
};

// `header.images` must be empty; the pixels are referenced, not copied, and
// returned to their pool once gRPC has sent them.
grpc::ByteBuffer EncodeBatch(const v1::Batch& header, OutgoingPixels pixels);

// DATA_LOSS when `wire` is not a well-formed Batch message, or when its
// `images` field claims more bytes than the message holds or than
// `max_pixel_bytes`: a peer cannot make the decoder allocate more than it
// sent, nor more than the caller allows.
absl::StatusOr<DecodedBatch> DecodeBatch(grpc::ByteBuffer& wire, BufferPool& pool,
                                         uint64_t max_pixel_bytes);

// Small control messages (requests, the other direction) in ByteBuffers.
grpc::ByteBuffer SerializeToByteBuffer(const google::protobuf::MessageLite& message);
// INVALID_ARGUMENT naming `what` when the bytes do not parse.
absl::Status ParseFromByteBuffer(grpc::ByteBuffer& wire, google::protobuf::MessageLite* message,
                                 const char* what);

}  // namespace heterodl

#endif  // HETERODL_SRC_WIRE_BATCH_CODEC_H_
