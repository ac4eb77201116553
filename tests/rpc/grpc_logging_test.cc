#include "src/rpc/grpc_logging.h"

#include "gtest/gtest.h"

namespace heterodl {
namespace {

TEST(GrpcLoggingTest, TheHeadlineDropsTheTreeOfCauses) {
  EXPECT_EQ(GrpcLogHeadline("UNKNOWN:No address added out of total 1 resolved for "
                            "'0.0.0.0:50999' {file:\"chttp2_server.cc\", children:[UNKNOWN:"
                            "Address already in use {errno:98}]}"),
            "UNKNOWN:No address added out of total 1 resolved for '0.0.0.0:50999'");
  EXPECT_EQ(GrpcLogHeadline("plain message"), "plain message");
  EXPECT_EQ(GrpcLogHeadline(""), "");
}

}  // namespace
}  // namespace heterodl
