// RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status, which this Abseil
// release (20220623) does not provide.
//
//   RETURN_IF_ERROR(file.Open());
//   ASSIGN_OR_RETURN(Dataset dataset, Dataset::Open(path));
#ifndef HETERODL_SRC_COMMON_STATUS_MACROS_H_
#define HETERODL_SRC_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define HETERODL_CONCAT_INNER_(a, b) a##b
#define HETERODL_CONCAT_(a, b) HETERODL_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                 \
  do {                                        \
    ::absl::Status heterodl_status_ = (expr); \
    if (!heterodl_status_.ok()) {             \
      return heterodl_status_;                \
    }                                         \
  } while (false)

#define ASSIGN_OR_RETURN(lhs, expr) \
  HETERODL_ASSIGN_OR_RETURN_IMPL_(HETERODL_CONCAT_(heterodl_statusor_, __LINE__), lhs, expr)

// `statusor` names a variable and `lhs` may declare one (`const Foo foo`):
// neither can be parenthesized.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define HETERODL_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                    \
  if (!statusor.ok()) {                                      \
    return std::move(statusor).status();                     \
  }                                                          \
  lhs = std::move(statusor).value()
// NOLINTEND(bugprone-macro-parentheses)

#endif  // HETERODL_SRC_COMMON_STATUS_MACROS_H_
