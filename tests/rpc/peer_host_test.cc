#include "src/rpc/peer_host.h"

#include "gtest/gtest.h"

namespace heterodl {
namespace {

TEST(PeerHostTest, DropsThePortOfIpPeers) {
  EXPECT_EQ(PeerHost("ipv4:10.0.0.7:51234"), "ipv4:10.0.0.7");
  EXPECT_EQ(PeerHost("ipv4:127.0.0.1:1"), "ipv4:127.0.0.1");
  EXPECT_EQ(PeerHost("ipv6:[::1]:5000"), "ipv6:[::1]");
  EXPECT_EQ(PeerHost("ipv6:[fe80::1%eth0]:443"), "ipv6:[fe80::1%eth0]");
  // As gRPC writes them: URI-encoded.
  EXPECT_EQ(PeerHost("ipv6:%5B::1%5D:47332"), "ipv6:[::1]");
  EXPECT_EQ(PeerHost("ipv6:%5Bfe80::1%25eth0%5D:443"), "ipv6:[fe80::1%eth0]");
}

TEST(PeerHostTest, KeepsOtherPeersWhole) {
  EXPECT_EQ(PeerHost("unix:/tmp/heterodl.sock"), "unix:/tmp/heterodl.sock");
  EXPECT_EQ(PeerHost("ipv6:[::1]"), "ipv6:[::1]");
  EXPECT_EQ(PeerHost("ipv4:"), "ipv4:");
  EXPECT_EQ(PeerHost(""), "");
}

}  // namespace
}  // namespace heterodl
