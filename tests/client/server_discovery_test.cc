#include "src/client/server_discovery.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "gtest/gtest.h"

namespace heterodl {
namespace {

using ::testing::TempDir;

// Writes `text` to `path` as a script should: a new file renamed over the old.
void WriteAtomically(const std::string& path, const std::string& text) {
  const std::string staged = path + ".new";
  std::ofstream(staged) << text;
  std::filesystem::rename(staged, path);
}

std::string NewPath(const std::string& name) {
  std::string path = TempDir() + "/discovery_" + name;
  std::filesystem::remove(path);
  return path;
}

TEST(ServerDiscoveryTest, TheFileIsReadAgainWhenItChanges) {
  const std::string path = NewPath("changes");
  WriteAtomically(path, "# data hosts\n10.0.0.2:50051\n\n10.0.0.1:50051, 10.0.0.3:50051  # spot\n");
  ServerDiscovery discovery({{}, path, ""});
  EXPECT_EQ(discovery.Refresh(),
            (std::vector<std::string>{"10.0.0.1:50051", "10.0.0.2:50051", "10.0.0.3:50051"}));
  WriteAtomically(path, "10.0.0.3:50051\n10.0.0.4:50051\n");
  EXPECT_EQ(discovery.Refresh(), (std::vector<std::string>{"10.0.0.3:50051", "10.0.0.4:50051"}));
  WriteAtomically(path, "");
  EXPECT_TRUE(discovery.Refresh().empty());  // emptied on purpose: no servers
}

TEST(ServerDiscoveryTest, AMissingFileKeepsWhatItLastNamedAndBadLinesAreSkipped) {
  const std::string path = NewPath("missing");
  ServerDiscovery discovery({{"fixed:1"}, path, ""});
  EXPECT_EQ(discovery.Refresh(), (std::vector<std::string>{"fixed:1"}));  // not there yet
  WriteAtomically(path, "a:1\nno-port\nb:99999\n[::1]:7\n");
  EXPECT_EQ(discovery.Refresh(), (std::vector<std::string>{"[::1]:7", "a:1", "fixed:1"}));
  std::filesystem::remove(path);
  EXPECT_EQ(discovery.Refresh(), (std::vector<std::string>{"[::1]:7", "a:1", "fixed:1"}));
}

TEST(ServerDiscoveryTest, EveryAddressOfTheNameIsAServerAndAFailedLookupKeepsTheLast) {
  std::map<std::string, absl::StatusOr<std::vector<std::string>>> answers;
  answers.emplace("data", std::vector<std::string>{"10.1.0.5", "fd00::5"});
  ServerDiscovery discovery({{}, "", "data:50051"},
                            [&](const std::string& host) { return answers.at(host); });
  EXPECT_EQ(discovery.Refresh(), (std::vector<std::string>{"10.1.0.5:50051", "[fd00::5]:50051"}));
  answers.at("data") = absl::UnavailableError("resolver timed out");
  EXPECT_EQ(discovery.Refresh(), (std::vector<std::string>{"10.1.0.5:50051", "[fd00::5]:50051"}));
  answers.at("data") = std::vector<std::string>{"10.1.0.6", "10.1.0.5"};  // one left, one came
  EXPECT_EQ(discovery.Refresh(), (std::vector<std::string>{"10.1.0.5:50051", "10.1.0.6:50051"}));
}

TEST(ServerDiscoveryTest, TheSystemResolverFindsLoopbackAndNamesWhatIsMissing) {
  absl::StatusOr<std::vector<std::string>> local = SystemHostResolver()("localhost");
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_NE(std::find(local->begin(), local->end(), "127.0.0.1"), local->end());
  absl::StatusOr<std::vector<std::string>> literal = SystemHostResolver()("127.0.0.9");
  ASSERT_TRUE(literal.ok());
  EXPECT_EQ(*literal, (std::vector<std::string>{"127.0.0.9"}));
  absl::StatusOr<std::vector<std::string>> missing = SystemHostResolver()("no-such-host.invalid");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no-such-host.invalid"), std::string::npos);
}

TEST(ServerDiscoveryTest, SourcesAreValidated) {
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateServerSources({})));
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateServerSources({{"no-port"}, "", ""})));
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateServerSources({{}, "", "data"})));
  EXPECT_TRUE(ValidateServerSources({{}, "", "data:50051"}).ok());
  EXPECT_TRUE(ValidateServerSources({{}, "/tmp/servers", ""}).ok());
}

}  // namespace
}  // namespace heterodl
