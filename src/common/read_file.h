// Whole-file reads with errors that name the path.
#ifndef HETERODL_SRC_COMMON_READ_FILE_H_
#define HETERODL_SRC_COMMON_READ_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace heterodl {

// Reads a whole file. NotFound / PermissionDenied / Unavailable name the path
// and the system's reason.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Reads a whole regular file of at most `max_bytes`: what a data server does
// with a path a dataset names, which may be anything. Opened without
// blocking, so a FIFO with no writer cannot hold the caller; then
// FAILED_PRECONDITION naming the path and what it is when it is not a
// regular file (a FIFO, a device, a socket, a directory), or when it holds
// more than `max_bytes` (checked before anything is allocated, and again as
// it is read, for a file that grows). Otherwise as ReadFileToString.
absl::StatusOr<std::string> ReadRegularFile(const std::string& path, uint64_t max_bytes);

// The same for `path` relative to the directory `root_fd`, resolved beneath
// it (openat2 with RESOLVE_BENEATH): a "..", an absolute path or a symlink
// that would lead outside it is PERMISSION_DENIED, not read. Where openat2
// is missing (kernels before 5.6, some seccomp policies), the path must be
// checked lexically by the caller and a final symlink is refused.
absl::StatusOr<std::string> ReadRegularFileBeneath(int root_fd, const std::string& path,
                                                   uint64_t max_bytes);

}  // namespace heterodl

#endif  // HETERODL_SRC_COMMON_READ_FILE_H_
