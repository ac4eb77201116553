#include "src/client/dataset_handshake.h"

#include <string>

#include "gtest/gtest.h"
#include "src/wire/batch_layout.h"

namespace heterodl {
namespace {

TEST(BatchFieldsOfTest, AServerFromBeforeTheContractServesImages) {
  v1::DatasetInfo info;
  info.set_height(32);
  info.set_width(24);
  absl::StatusOr<google::protobuf::RepeatedPtrField<v1::FieldSpec>> fields = BatchFieldsOf(info);
  ASSERT_TRUE(fields.ok()) << fields.status();
  ASSERT_EQ(fields->size(), 1);
  EXPECT_EQ((*fields)[0].SerializeAsString(), ImagesField(32, 24).SerializeAsString());
}

TEST(BatchFieldsOfTest, ImagesAloneOrWithTheirMasksAreTakenAndOthersNamed) {
  v1::DatasetInfo info;
  *info.add_fields() = ImagesField(8, 6);
  EXPECT_TRUE(BatchFieldsOf(info).ok());
  *info.add_fields() = MasksField(8, 6, v1::DTYPE_INT32);
  EXPECT_TRUE(BatchFieldsOf(info).ok());
  v1::FieldSpec* masks = info.mutable_fields(1);
  // Masks of another size than the images, or of a type no mask has.
  masks->set_shape(0, 7);
  const absl::Status other_size = BatchFieldsOf(info).status();
  EXPECT_TRUE(absl::IsUnimplemented(other_size)) << other_size;
  EXPECT_NE(other_size.message().find("the fields images, masks"), std::string::npos) << other_size;
  masks->set_shape(0, 8);
  masks->set_dtype(v1::DTYPE_FLOAT32);
  EXPECT_TRUE(absl::IsUnimplemented(BatchFieldsOf(info).status()));
  masks->set_dtype(v1::DTYPE_UINT8);
  EXPECT_TRUE(BatchFieldsOf(info).ok());
  // A field this loader does not know.
  v1::FieldSpec* boxes = info.add_fields();
  boxes->set_name("boxes");
  boxes->set_dtype(v1::DTYPE_FLOAT32);
  boxes->add_shape(4);
  boxes->set_ragged(true);
  const absl::Status more = BatchFieldsOf(info).status();
  EXPECT_TRUE(absl::IsUnimplemented(more)) << more;
  EXPECT_NE(more.message().find("the fields images, masks, boxes"), std::string::npos) << more;
  masks->set_name("Masks!");
  const absl::Status bad = BatchFieldsOf(info).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(bad)) << bad;
  EXPECT_NE(bad.message().find("'Masks!' is not"), std::string::npos) << bad;
}

}  // namespace
}  // namespace heterodl
