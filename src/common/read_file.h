// Whole-file reads with errors that name the path.
#ifndef HETERODL_SRC_COMMON_READ_FILE_H_
#define HETERODL_SRC_COMMON_READ_FILE_H_

#include <string>

#include "absl/status/statusor.h"

namespace heterodl {

// Reads a whole file. NotFound / PermissionDenied / Unavailable name the path
// and the system's reason.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace heterodl

#endif  // HETERODL_SRC_COMMON_READ_FILE_H_
