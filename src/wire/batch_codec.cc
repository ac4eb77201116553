#include "src/wire/batch_codec.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/slice.h>

#include <limits>
#include <string>

#include "absl/strings/str_cat.h"

namespace heterodl {
namespace {

using google::protobuf::internal::WireFormatLite;

constexpr int kImagesField = v1::Batch::kImagesFieldNumber;
const uint32_t kImagesTag =
    WireFormatLite::MakeTag(kImagesField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);

void ReleaseOwner(void* owner) { delete static_cast<std::shared_ptr<const void>*>(owner); }

}  // namespace

grpc::ByteBuffer EncodeBatch(const v1::Batch& header, OutgoingPixels pixels) {
  std::string prefix = header.SerializeAsString();
  {
    google::protobuf::io::StringOutputStream stream(&prefix);
    google::protobuf::io::CodedOutputStream output(&stream);
    output.WriteTag(kImagesTag);
    output.WriteVarint64(pixels.size);
  }
  if (pixels.size == 0) {
    grpc::Slice only(prefix);
    return grpc::ByteBuffer(&only, 1);
  }
  // gRPC slices want a mutable pointer; it never writes through it.
  auto* owner = new std::shared_ptr<const void>(std::move(pixels.owner));
  grpc::Slice slices[2] = {grpc::Slice(prefix), grpc::Slice(const_cast<uint8_t*>(pixels.data),
                                                            pixels.size, &ReleaseOwner, owner)};
  return grpc::ByteBuffer(slices, 2);
}

absl::StatusOr<DecodedBatch> DecodeBatch(grpc::ByteBuffer& wire, BufferPool& pool,
                                         uint64_t max_pixel_bytes) {
  DecodedBatch batch;
  const uint64_t wire_bytes = wire.Length();
  if (wire_bytes > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
    return absl::DataLossError(
        absl::StrCat("a batch message of ", wire_bytes, " bytes, over what one message may hold"));
  }
  grpc::ProtoBufferReader reader(&wire);
  if (!reader.status().ok()) {
    return absl::DataLossError(absl::StrCat("unreadable batch: ", reader.status().error_message()));
  }
  // No total-bytes limit below INT_MAX: protobuf reports a message ending
  // exactly at its limit as cut short. The message's length bounds claims.
  google::protobuf::io::CodedInputStream input(&reader);
  // Everything but the pixels, re-serialized as protobuf skips it, then parsed.
  std::string rest;
  bool images_seen = false;
  {
    google::protobuf::io::StringOutputStream rest_stream(&rest);
    google::protobuf::io::CodedOutputStream rest_output(&rest_stream);
    while (const uint32_t tag = input.ReadTag()) {
      if (tag != kImagesTag) {
        if (!WireFormatLite::SkipField(&input, tag, &rest_output)) {
          return absl::DataLossError("malformed batch message: a field cannot be skipped");
        }
        continue;
      }
      uint64_t size = 0;
      if (images_seen || !input.ReadVarint64(&size)) {
        return absl::DataLossError("malformed batch message: bad images field");
      }
      // What is left of the message bounds the claim before anything is
      // allocated.
      const uint64_t left = wire_bytes - static_cast<uint64_t>(input.CurrentPosition());
      if (size > left || size > max_pixel_bytes) {
        return absl::DataLossError(absl::StrCat("malformed batch message: its images field claims ",
                                                size, " bytes; the message has ", left,
                                                " left and the limit is ", max_pixel_bytes));
      }
      images_seen = true;
      absl::StatusOr<PooledBuffer> pixels = pool.Get(size);
      if (!pixels.ok()) {
        return pixels.status();
      }
      if (!input.ReadRaw(pixels->data(), static_cast<int>(size))) {
        return absl::DataLossError("malformed batch message: images cut short");
      }
      batch.pixels = *std::move(pixels);
    }
    if (!input.ConsumedEntireMessage()) {
      return absl::DataLossError("malformed batch message: it ends inside a field");
    }
  }
  if (!batch.header.ParseFromString(rest)) {
    return absl::DataLossError("malformed batch message: unparsable fields");
  }
  return batch;
}

grpc::ByteBuffer SerializeToByteBuffer(const google::protobuf::MessageLite& message) {
  grpc::Slice slice(message.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

absl::Status ParseFromByteBuffer(grpc::ByteBuffer& wire, google::protobuf::MessageLite* message,
                                 const char* what) {
  grpc::ProtoBufferReader reader(&wire);
  if (!reader.status().ok() || !message->ParseFromZeroCopyStream(&reader)) {
    return absl::InvalidArgumentError(absl::StrCat("malformed ", what, " message"));
  }
  return absl::OkStatus();
}

}  // namespace heterodl
