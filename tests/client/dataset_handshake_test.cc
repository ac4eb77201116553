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

TEST(BatchFieldsOfTest, DeclaredFieldsAreCheckedAndOnlyImagesAreTakenYet) {
  v1::DatasetInfo info;
  *info.add_fields() = ImagesField(8, 8);
  EXPECT_TRUE(BatchFieldsOf(info).ok());
  v1::FieldSpec* masks = info.add_fields();
  masks->set_name("masks");
  masks->set_dtype(v1::DTYPE_UINT8);
  masks->add_shape(8);
  masks->add_shape(8);
  const absl::Status more = BatchFieldsOf(info).status();
  EXPECT_TRUE(absl::IsUnimplemented(more)) << more;
  EXPECT_NE(more.message().find("the fields images, masks"), std::string::npos) << more;
  masks->set_name("Masks!");
  const absl::Status bad = BatchFieldsOf(info).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(bad)) << bad;
  EXPECT_NE(bad.message().find("'Masks!' is not"), std::string::npos) << bad;
}

}  // namespace
}  // namespace heterodl
