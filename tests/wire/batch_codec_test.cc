#include "src/wire/batch_codec.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <grpcpp/support/slice.h>

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace heterodl {
namespace {

constexpr uint64_t kLimit = 1 << 20;

v1::Batch Header() {
  v1::Batch header;
  header.mutable_id()->set_epoch(3);
  header.mutable_id()->set_index(9);
  header.set_height(2);
  header.set_width(2);
  header.set_channels(3);
  for (int64_t i = 0; i < 2; ++i) {
    header.add_labels(i + 10);
    header.add_indices(i + 100);
    header.add_status(v1::SAMPLE_OK);
  }
  return header;
}

PooledBuffer Pixels(BufferPool& pool, size_t bytes) {
  PooledBuffer pixels = *pool.Get(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    pixels.data()[i] = static_cast<uint8_t>(i * 31);
  }
  return pixels;
}

std::string Flatten(grpc::ByteBuffer& wire) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(wire.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return bytes;
}

grpc::ByteBuffer FromBytes(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

TEST(BatchCodecTest, RoundTripsAndSendsThePixelsWithoutACopy) {
  std::shared_ptr<BufferPool> server = BufferPool::Create(2);
  std::shared_ptr<BufferPool> client = BufferPool::Create(2);
  PooledBuffer pixels = Pixels(*server, 24);
  const uint8_t* address = pixels.data();
  const std::string expected(pixels.view());
  grpc::ByteBuffer wire = EncodeBatch(Header(), OutgoingPixels::Own(std::move(pixels)));

  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(wire.Dump(&slices).ok());
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(slices[1].begin(), address);  // the batch buffer itself

  absl::StatusOr<DecodedBatch> decoded = DecodeBatch(wire, *client, kLimit);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->header.SerializeAsString(), Header().SerializeAsString());
  EXPECT_EQ(decoded->pixels.view(), expected);
}

TEST(BatchCodecTest, TheEncodingIsAPlainBatchMessage) {
  std::shared_ptr<BufferPool> pool = BufferPool::Create(2);
  PooledBuffer pixels = Pixels(*pool, 24);
  const std::string expected(pixels.view());
  grpc::ByteBuffer wire = EncodeBatch(Header(), OutgoingPixels::Own(std::move(pixels)));
  v1::Batch parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(wire)));
  EXPECT_EQ(parsed.images(), expected);
  parsed.clear_images();
  EXPECT_EQ(parsed.SerializeAsString(), Header().SerializeAsString());

  // And a batch serialized by protobuf (fields in any order) decodes.
  v1::Batch whole = Header();
  whole.set_images(expected);
  grpc::ByteBuffer standard = FromBytes(whole.SerializeAsString());
  absl::StatusOr<DecodedBatch> decoded = DecodeBatch(standard, *pool, kLimit);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->pixels.view(), expected);
}

TEST(BatchCodecTest, PixelsGoBackToTheirPoolOnceSent) {
  std::shared_ptr<BufferPool> pool = BufferPool::Create(2);
  { grpc::ByteBuffer wire = EncodeBatch(Header(), OutgoingPixels::Own(Pixels(*pool, 4096))); }
  PooledBuffer again = *pool->Get(4096);
  EXPECT_EQ(pool->allocations(), 1);
}

TEST(BatchCodecTest, MalformedMessagesAreDataLoss) {
  std::shared_ptr<BufferPool> pool = BufferPool::Create(2);
  grpc::ByteBuffer good = EncodeBatch(Header(), OutgoingPixels::Own(Pixels(*pool, 24)));
  const std::string bytes = Flatten(good);
  const std::string cases[] = {
      bytes.substr(0, bytes.size() - 1),            // pixels cut short
      bytes.substr(0, bytes.size() - 25) + "\x2a",  // images length missing
      bytes + "\x2a\x01x",                          // images twice
      std::string("\x0a\x7f\x01", 3),               // a field running past the end
      std::string("\x07", 1),                       // wire type 7 does not exist
  };
  for (const std::string& bad : cases) {
    grpc::ByteBuffer wire = FromBytes(bad);
    EXPECT_EQ(DecodeBatch(wire, *pool, kLimit).status().code(), absl::StatusCode::kDataLoss)
        << ::testing::PrintToString(bad);
  }
}

// The header of a message whose images field claims `claimed` bytes and
// carries `carried`.
std::string Forged(uint64_t claimed, size_t carried) {
  std::string bytes = Header().SerializeAsString();
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream output(&stream);
    output.WriteTag((v1::Batch::kImagesFieldNumber << 3) | 2);
    output.WriteVarint64(claimed);
  }
  return bytes + std::string(carried, 'x');
}

TEST(BatchCodecTest, AClaimedSizeBeyondTheMessageOrTheLimitAllocatesNothing) {
  std::shared_ptr<BufferPool> pool = BufferPool::Create(2);
  // What a server (or a man in the middle) could claim: more than it sent,
  // up to sizes no int holds, or more than the loader allows.
  const std::pair<uint64_t, size_t> cases[] = {
      {1ull << 40, 16},          // a terabyte, 16 bytes sent
      {(1ull << 31) + 5, 16},    // just past what an int holds
      {100, 99},                 // one byte short
      {kLimit + 1, kLimit + 1},  // all there, but over the limit
  };
  for (const auto& [claimed, carried] : cases) {
    grpc::ByteBuffer wire = FromBytes(Forged(claimed, carried));
    const absl::Status status = DecodeBatch(wire, *pool, kLimit).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << claimed << ": " << status;
  }
  EXPECT_EQ(pool->allocations(), 0);
  // The honest one of the same shape decodes.
  grpc::ByteBuffer honest = FromBytes(Forged(100, 100));
  const absl::StatusOr<DecodedBatch> decoded = DecodeBatch(honest, *pool, kLimit);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->pixels.size(), 100u);
}

TEST(BatchCodecTest, ControlMessagesRoundTripAndGarbageIsInvalidArgument) {
  v1::BatchRequest request;
  request.mutable_batch()->set_index(5);
  grpc::ByteBuffer wire = SerializeToByteBuffer(request);
  v1::BatchRequest parsed;
  ASSERT_TRUE(ParseFromByteBuffer(wire, &parsed, "BatchRequest").ok());
  EXPECT_EQ(parsed.batch().index(), 5u);

  grpc::ByteBuffer garbage = FromBytes(std::string("\x12\x50", 2));
  const absl::Status status = ParseFromByteBuffer(garbage, &parsed, "BatchRequest");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "malformed BatchRequest message");
}

}  // namespace
}  // namespace heterodl
