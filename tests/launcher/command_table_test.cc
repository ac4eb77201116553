// The launcher as a table, and "flags -> options" as a pure function: no
// subprocess, the flags set in-process (restored by FlagSaver).
#include "launcher/command_table.h"

#include <set>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "gtest/gtest.h"
#include "launcher/command_line.h"
#include "launcher/commands.h"
#include "launcher/flags.h"
#include "tests/testing/status_testing.h"

namespace heterodl {
namespace {

// A usage error whose message holds `words`.
void ExpectUsageError(const absl::StatusOr<DataServerOptions>& options, const std::string& words) {
  ASSERT_FALSE(options.ok()) << "expected: " << words;
  EXPECT_TRUE(absl::IsInvalidArgument(options.status())) << options.status();
  EXPECT_NE(options.status().message().find(words), std::string::npos) << options.status();
}

TEST(CommandTableTest, EveryCommandRunsAFunctionAndNamesOnlyRealFlags) {
  std::set<std::string> names;
  for (const CommandInfo& command : Commands()) {
    SCOPED_TRACE(command.name);
    EXPECT_NE(command.run, nullptr);
    EXPECT_TRUE(names.insert(command.name).second) << "named twice";
    EXPECT_EQ(FindCommand(command.name), &command);
    std::set<std::string> flags;
    for (const char* flag : command.flags) {
      EXPECT_NE(absl::FindCommandLineFlag(flag), nullptr) << flag;
      EXPECT_TRUE(flags.insert(flag).second) << flag << " listed twice";
      EXPECT_TRUE(CommandTakesFlag(command, flag));
    }
  }
  EXPECT_EQ(FindCommand("serve")->run, &RunServeCommand);
  EXPECT_EQ(FindCommand("launch")->run, &RunLaunchCommand);
  EXPECT_EQ(FindCommand("serv"), nullptr);
  EXPECT_EQ(SuggestCommand("serv"), " (did you mean 'serve'?)");
}

TEST(CommandTableTest, HelpfullListsEveryFlagOnceWithItsDefault) {
  const std::string help = AllFlagsHelp();
  for (const CommandInfo& command : Commands()) {
    for (const char* flag : command.flags) {
      const std::string line = DashedFlag(flag) + " (default: ";
      const size_t first = help.find("  " + line);
      EXPECT_NE(first, std::string::npos) << flag;
      EXPECT_EQ(help.find("  " + line, first + 1), std::string::npos) << flag << " twice";
    }
  }
  EXPECT_NE(help.find("--worker-nice (default: '10')"), std::string::npos);
}

TEST(ServeOptionsTest, FlagsBecomeTheServersOptions) {
  absl::FlagSaver saved;
  absl::SetFlag(&FLAGS_dataset, "/data/train");
  absl::SetFlag(&FLAGS_port, 6000);
  absl::SetFlag(&FLAGS_threads, 3);
  absl::SetFlag(&FLAGS_strict_decode, true);
  absl::SetFlag(&FLAGS_pixel_port, -1);
  absl::SetFlag(&FLAGS_max_stream_mb, 64);
  ASSERT_OK_AND_ASSIGN(const DataServerOptions options, ServeOptionsFromFlags());
  EXPECT_EQ(options.dataset, "/data/train");
  EXPECT_EQ(options.address, "0.0.0.0:6000");
  EXPECT_EQ(options.threads, 3);
  EXPECT_TRUE(options.decoding.strict_decode);
  EXPECT_EQ(options.pixel_port, -1);
  EXPECT_EQ(options.streams.max_stream_bytes, uint64_t{64} << 20);
  absl::SetFlag(&FLAGS_address, "127.0.0.1:0");
  ASSERT_OK_AND_ASSIGN(const DataServerOptions on_loopback, ServeOptionsFromFlags());
  EXPECT_EQ(on_loopback.address, "127.0.0.1:0");
}

TEST(ServeOptionsTest, UsageErrorsNameTheFlag) {
  absl::FlagSaver saved;
  absl::SetFlag(&FLAGS_dataset, "");
  ExpectUsageError(ServeOptionsFromFlags(), "serve needs --dataset");
  absl::SetFlag(&FLAGS_dataset, "/data/train");
  absl::SetFlag(&FLAGS_worker_nice, 20);
  ExpectUsageError(ServeOptionsFromFlags(), "--worker-nice must be in [0, 19]");
  absl::SetFlag(&FLAGS_worker_nice, 10);
  absl::SetFlag(&FLAGS_pixel_port, 70000);
  ExpectUsageError(ServeOptionsFromFlags(), "--pixel-port must be -1");
  absl::SetFlag(&FLAGS_pixel_port, 0);
  absl::SetFlag(&FLAGS_min_box_visibility, 1.5);
  ExpectUsageError(ServeOptionsFromFlags(), "--min-box-visibility must be in [0, 1]");
  absl::SetFlag(&FLAGS_min_box_visibility, 0.25);
  absl::SetFlag(&FLAGS_image_root, "/data/images");
  ASSERT_OK_AND_ASSIGN(const DataServerOptions options, ServeOptionsFromFlags());
  EXPECT_EQ(options.decoding.min_box_visibility, 0.25);
  EXPECT_EQ(options.files.image_root, "/data/images");
}

}  // namespace
}  // namespace heterodl
