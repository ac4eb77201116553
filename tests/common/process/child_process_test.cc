#include "src/common/process/child_process.h"

#include <signal.h>

#include "gtest/gtest.h"

namespace heterodl {
namespace {

TEST(ChildProcessTest, ReportsExitCode) {
  absl::StatusOr<ChildProcess> child = ChildProcess::Spawn({"/bin/sh", "-c", "exit 3"});
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(child->Wait(), 3);
}

TEST(ChildProcessTest, SignalledChildReportsShellStyleCode) {
  absl::StatusOr<ChildProcess> child = ChildProcess::Spawn({"/bin/sleep", "30"});
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_FALSE(child->WaitFor(absl::Milliseconds(50)).has_value());
  child->Signal(SIGTERM);
  EXPECT_EQ(child->Wait(), 128 + SIGTERM);
}

TEST(ChildProcessTest, PassesExtraEnvironment) {
  absl::StatusOr<ChildProcess> child = ChildProcess::Spawn(
      {"/bin/sh", "-c", "test \"$HETERODL_X\" = yes"}, {.extra_env = {"HETERODL_X=yes"}});
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(child->Wait(), 0);
}

TEST(ChildProcessTest, MissingProgramIsAnError) {
  absl::StatusOr<ChildProcess> child = ChildProcess::Spawn({"/nonexistent/program"});
  if (child.ok()) {
    // posix_spawn may report exec failure through the child's exit code.
    EXPECT_EQ(child->Wait(), 127);
  }
}

TEST(ChildProcessTest, DestructorKillsRunningChild) {
  pid_t pid;
  {
    absl::StatusOr<ChildProcess> child = ChildProcess::Spawn({"/bin/sleep", "30"});
    ASSERT_TRUE(child.ok());
    pid = child->pid();
  }
  EXPECT_NE(::kill(pid, 0), 0);  // reaped: no such process
}

TEST(ChildProcessTest, OwnProcessGroupLeavesOursAndLeadsItsOwn) {
  absl::StatusOr<ChildProcess> alone =
      ChildProcess::Spawn({"/bin/sleep", "30"}, {.own_process_group = true});
  ASSERT_TRUE(alone.ok()) << alone.status();
  absl::StatusOr<ChildProcess> with_us = ChildProcess::Spawn({"/bin/sleep", "30"});
  ASSERT_TRUE(with_us.ok()) << with_us.status();
  EXPECT_EQ(::getpgid(alone->pid()), alone->pid());
  EXPECT_EQ(::getpgid(with_us->pid()), ::getpgrp());
}

}  // namespace
}  // namespace heterodl
