#include "src/wire/batch_layout.h"

#include <string>

#include "gtest/gtest.h"

namespace heterodl {
namespace {

using Fields = google::protobuf::RepeatedPtrField<v1::FieldSpec>;
using Lengths = google::protobuf::RepeatedPtrField<v1::RaggedLengths>;

v1::FieldSpec Field(const std::string& name, v1::DType dtype, const std::vector<uint32_t>& shape,
                    bool ragged = false) {
  v1::FieldSpec field;
  field.set_name(name);
  field.set_dtype(dtype);
  for (const uint32_t dimension : shape) {
    field.add_shape(dimension);
  }
  field.set_ragged(ragged);
  return field;
}

// A detection batch's fields: images, then each sample's boxes and their
// labels.
Fields Detection() {
  Fields fields;
  *fields.Add() = ImagesField(8, 10);
  *fields.Add() = Field("boxes", v1::DTYPE_FLOAT32, {4}, true);
  *fields.Add() = Field("box_labels", v1::DTYPE_INT64, {}, true);
  return fields;
}

Lengths LengthsOf(const std::vector<std::vector<uint32_t>>& per_field) {
  Lengths lengths;
  for (const std::vector<uint32_t>& field : per_field) {
    v1::RaggedLengths* added = lengths.Add();
    for (const uint32_t length : field) {
      added->add_lengths(length);
    }
  }
  return lengths;
}

TEST(BatchLayoutTest, AFieldIsDescribedWithASamplesShape) {
  EXPECT_EQ(DescribeField(ImagesField(224, 160)), "images uint8 [224, 160, 3]");
  EXPECT_EQ(DescribeField(Field("label", v1::DTYPE_INT64, {})), "label int64 []");
  // A ragged field's list length varies: n, not an empty shape.
  EXPECT_EQ(DescribeField(Field("tokens", v1::DTYPE_INT64, {}, true)), "tokens int64 [n] (ragged)");
  EXPECT_EQ(DescribeField(Field("boxes", v1::DTYPE_FLOAT32, {4}, true)),
            "boxes float32 [n, 4] (ragged)");
  v1::FieldSpec collated = Field("tokens", v1::DTYPE_INT64, {8, 12});
  collated.set_collated(true);
  EXPECT_EQ(DescribeField(collated), "tokens int64 [B, 12] (collated: each batch its own shape)");
}

TEST(BatchLayoutTest, ClassificationIsItsImagesAlone) {
  Fields fields;
  *fields.Add() = ImagesField(224, 224);
  ASSERT_TRUE(CheckFieldSpecs(fields).ok());
  absl::StatusOr<BatchLayout> layout = LayOutBatch(fields, 256, {}, {}, uint64_t{1} << 30);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->payload_bytes, uint64_t{256} * 224 * 224 * 3);
  ASSERT_EQ(layout->fields.size(), 1u);
  EXPECT_EQ(layout->fields[0].name, "images");
  EXPECT_EQ(layout->fields[0].offset, 0u);
  EXPECT_EQ(layout->fields[0].shape, (std::vector<int64_t>{256, 224, 224, 3}));
}

TEST(BatchLayoutTest, FieldsFollowEachOtherAtAlignedOffsets) {
  const Fields fields = Detection();
  ASSERT_TRUE(CheckFieldSpecs(fields).ok());
  // Three samples with 2, 0 and 3 boxes.
  absl::StatusOr<BatchLayout> layout =
      LayOutBatch(fields, 3, LengthsOf({{2, 0, 3}, {2, 0, 3}}), {}, 1 << 20);
  ASSERT_TRUE(layout.ok()) << layout.status();
  const std::vector<FieldSlice>& slices = layout->fields;
  ASSERT_EQ(slices.size(), 3u);
  EXPECT_EQ(slices[0].bytes, 3u * 8 * 10 * 3);  // 720
  EXPECT_EQ(slices[1].offset, 768u);            // the next multiple of 64
  EXPECT_EQ(slices[1].shape, (std::vector<int64_t>{5, 4}));
  EXPECT_EQ(slices[1].bytes, 5u * 4 * 4);
  EXPECT_EQ(slices[1].lengths, (std::vector<uint32_t>{2, 0, 3}));
  EXPECT_EQ(slices[2].offset, 768u + 128u);
  EXPECT_EQ(slices[2].shape, (std::vector<int64_t>{5}));
  EXPECT_EQ(layout->payload_bytes, 768u + 128u + 40u);
}

TEST(BatchLayoutTest, CountsThatDoNotMatchTheFieldsAreRefused) {
  const Fields fields = Detection();
  // Lengths missing, one too many, or not one per sample.
  EXPECT_TRUE(absl::IsInvalidArgument(LayOutBatch(fields, 3, {}, {}, 1 << 20).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      LayOutBatch(fields, 3, LengthsOf({{1, 1, 1}, {1, 1, 1}, {1, 1, 1}}), {}, 1 << 20).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      LayOutBatch(fields, 3, LengthsOf({{1, 1}, {1, 1, 1}}), {}, 1 << 20).status()));
  // A forged length: refused by its own bound, not allocated.
  const absl::Status forged =
      LayOutBatch(fields, 3, LengthsOf({{1, 4000000000u, 1}, {1, 1, 1}}), {}, 1 << 20).status();
  EXPECT_TRUE(absl::IsInvalidArgument(forged)) << forged;
  EXPECT_NE(forged.message().find("at most 65536"), std::string::npos) << forged;
}

google::protobuf::RepeatedPtrField<v1::FieldShape> ShapesOf(
    const std::vector<std::vector<uint32_t>>& per_field) {
  google::protobuf::RepeatedPtrField<v1::FieldShape> shapes;
  for (const std::vector<uint32_t>& field : per_field) {
    shapes.Add()->mutable_dims()->Assign(field.begin(), field.end());
  }
  return shapes;
}

TEST(BatchLayoutTest, CollatedFieldsHaveEachBatchsOwnShape) {
  // A collate_fn's batch: tokens padded to the batch's longest, and the
  // lengths; described with a batch of 2 whose longest had 5 tokens.
  Fields fields;
  *fields.Add() = Field("tokens", v1::DTYPE_INT64, {2, 5});
  fields[0].set_collated(true);
  *fields.Add() = Field("lengths", v1::DTYPE_INT32, {2});
  fields[1].set_collated(true);
  ASSERT_TRUE(CheckFieldSpecs(fields).ok());
  absl::StatusOr<BatchLayout> layout = LayOutBatch(fields, 3, {}, ShapesOf({{3, 9}, {3}}), 1 << 20);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->fields[0].shape, (std::vector<int64_t>{3, 9}));
  EXPECT_EQ(layout->fields[0].bytes, 3u * 9 * 8);
  EXPECT_EQ(layout->fields[1].shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(layout->fields[1].offset, 256u);  // 216 bytes, aligned up
  EXPECT_EQ(layout->payload_bytes, 256u + 12);
  // A batch that could not be collated: every dimension 0, no bytes.
  layout = LayOutBatch(fields, 3, {}, ShapesOf({{0, 0}, {0}}), 1 << 20);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->payload_bytes, 0u);
  EXPECT_EQ(layout->fields[0].shape, (std::vector<int64_t>{0, 0}));

  const auto refused = [&](const google::protobuf::RepeatedPtrField<v1::FieldShape>& shapes) {
    const absl::Status status = LayOutBatch(fields, 3, {}, shapes, 1 << 20).status();
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
    return std::string(status.message());
  };
  EXPECT_NE(refused(ShapesOf({{3, 9}})).find("no shape for collated batch field 'lengths'"),
            std::string::npos);
  EXPECT_NE(refused(ShapesOf({{3, 9}, {3}, {1}})).find("3 collated shapes for 2"),
            std::string::npos);
  EXPECT_NE(refused(ShapesOf({{27}, {3}})).find("1 dimensions in this batch and 2"),
            std::string::npos);
  const absl::Status huge =
      LayOutBatch(fields, 3, {}, ShapesOf({{4000000000u, 4000000000u}, {3}}), 1 << 20).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(huge)) << huge;

  Fields both;
  *both.Add() = Field("boxes", v1::DTYPE_FLOAT32, {4}, true);
  both[0].set_collated(true);
  EXPECT_NE(CheckFieldSpecs(both).message().find("both ragged and collated"), std::string::npos);
}

TEST(BatchLayoutTest, APayloadOverTheLimitIsRefusedWithoutOverflowing) {
  Fields fields;
  *fields.Add() = Field("huge", v1::DTYPE_INT64, {65536, 65536, 65536, 65536, 65536, 65536});
  ASSERT_TRUE(CheckFieldSpecs(fields).ok());
  const absl::Status status = LayOutBatch(fields, 4096, {}, {}, uint64_t{1} << 30).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_NE(status.message().find("field 'huge'"), std::string::npos) << status;
  Fields images;
  *images.Add() = ImagesField(224, 224);
  EXPECT_TRUE(absl::IsFailedPrecondition(
      LayOutBatch(images, 256, {}, {}, uint64_t{256} * 224 * 224 * 3 - 1).status()));
}

TEST(BatchLayoutTest, SpecsAServerMayNotDeclare) {
  const auto refused = [](const Fields& fields) {
    const absl::Status status = CheckFieldSpecs(fields);
    EXPECT_TRUE(absl::IsInvalidArgument(status));
    return std::string(status.message());
  };
  EXPECT_NE(refused({}).find("0 batch fields"), std::string::npos);
  Fields named;
  *named.Add() = Field("Images", v1::DTYPE_UINT8, {2});
  EXPECT_NE(refused(named).find("'Images' is not"), std::string::npos);
  Fields twice;
  *twice.Add() = ImagesField(2, 2);
  *twice.Add() = ImagesField(2, 2);
  EXPECT_NE(refused(twice).find("'images' twice"), std::string::npos);
  Fields typeless;
  *typeless.Add() = Field("masks", v1::DTYPE_UNSPECIFIED, {2, 2});
  EXPECT_NE(refused(typeless).find("unknown dtype 0"), std::string::npos);
  Fields flat;
  *flat.Add() = Field("masks", v1::DTYPE_UINT8, {2, 0});
  EXPECT_NE(refused(flat).find("dimension of 0"), std::string::npos);
  Fields deep;
  *deep.Add() = Field("deep", v1::DTYPE_UINT8, {1, 1, 1, 1, 1, 1, 1});
  EXPECT_NE(refused(deep).find("7 dimensions"), std::string::npos);
  Fields many;
  for (int i = 0; i <= kMaxFields; ++i) {
    *many.Add() = Field("f" + std::to_string(i), v1::DTYPE_UINT8, {1});
  }
  EXPECT_NE(refused(many).find("33 batch fields"), std::string::npos);
}

TEST(BatchLayoutTest, DTypesHaveNumPysNamesAndSizes) {
  EXPECT_EQ(DTypeBytes(v1::DTYPE_UINT8), 1u);
  EXPECT_EQ(DTypeBytes(v1::DTYPE_INT32), 4u);
  EXPECT_EQ(DTypeBytes(v1::DTYPE_INT64), 8u);
  EXPECT_EQ(DTypeBytes(v1::DTYPE_FLOAT32), 4u);
  EXPECT_EQ(DTypeBytes(static_cast<v1::DType>(99)), 0u);
  EXPECT_EQ(DTypeName(v1::DTYPE_FLOAT32), "float32");
}

}  // namespace
}  // namespace heterodl
