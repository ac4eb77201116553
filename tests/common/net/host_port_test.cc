#include "src/common/net/host_port.h"

#include "gtest/gtest.h"

namespace heterodl {
namespace {

TEST(HostPortTest, SplitsNamesAddressesAndBracketedIpv6) {
  absl::StatusOr<HostPort> name = SplitHostPort("algo-2:50051");
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(name->host, "algo-2");
  EXPECT_EQ(name->port, 50051);
  absl::StatusOr<HostPort> any = SplitHostPort("0.0.0.0:0");
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(any->host, "0.0.0.0");
  EXPECT_EQ(any->port, 0);
  absl::StatusOr<HostPort> ipv6 = SplitHostPort("[::1]:8080");
  ASSERT_TRUE(ipv6.ok());
  EXPECT_EQ(ipv6->host, "::1");
  EXPECT_EQ(ipv6->port, 8080);
}

TEST(HostPortTest, RefusesWhatIsNotHostAndPort) {
  for (const char* bad : {"algo-2", ":50051", "algo-2:", "algo-2:http", "algo-2:70000", "algo-2:-1",
                          "::1:8080", "[::1:8080", "[]:8080"}) {
    absl::StatusOr<HostPort> split = SplitHostPort(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(split.status())) << bad;
    if (!split.ok()) {
      EXPECT_NE(split.status().message().find(bad), std::string::npos) << split.status();
    }
  }
}

TEST(HostPortTest, AServerToConnectToHasAPort) {
  absl::StatusOr<HostPort> server = SplitServerAddress("algo-2:50051");
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(server->port, 50051);
  for (const char* bad : {"algo-2:0", "algo-2", "algo-2:99999", "fe80::1:5"}) {
    absl::StatusOr<HostPort> split = SplitServerAddress(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(split.status())) << bad;
    EXPECT_NE(split.status().message().find(bad), std::string::npos) << split.status();
  }
}

}  // namespace
}  // namespace heterodl
