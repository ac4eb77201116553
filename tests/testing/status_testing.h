// Test assertions on absl::Status and StatusOr: a failure fails the test with
// the status's message, never crashes the suite by reading a missing value.
//
//   ASSERT_OK(server->Start());
//   EXPECT_OK(loader->SetEpoch(3));
//   ASSERT_OK_AND_ASSIGN(std::unique_ptr<Listener> listener, Listen());
#ifndef HETERODL_TESTS_TESTING_STATUS_TESTING_H_
#define HETERODL_TESTS_TESTING_STATUS_TESTING_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "src/common/status_macros.h"

#define ASSERT_OK(expr)                                     \
  do {                                                      \
    const ::absl::Status& heterodl_status_ = (expr);        \
    ASSERT_TRUE(heterodl_status_.ok()) << heterodl_status_; \
  } while (false)

#define EXPECT_OK(expr)                                     \
  do {                                                      \
    const ::absl::Status heterodl_status_ = (expr);         \
    EXPECT_TRUE(heterodl_status_.ok()) << heterodl_status_; \
  } while (false)

#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  HETERODL_ASSERT_OK_AND_ASSIGN_IMPL_(HETERODL_CONCAT_(heterodl_statusor_, __LINE__), lhs, expr)

#define HETERODL_ASSERT_OK_AND_ASSIGN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                        \
  ASSERT_TRUE(statusor.ok()) << statusor.status();               \
  lhs = std::move(statusor).value()

#endif  // HETERODL_TESTS_TESTING_STATUS_TESTING_H_
