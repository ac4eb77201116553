#include "src/common/read_file.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/common/net/unique_fd.h"

namespace heterodl {
namespace {

absl::Status ErrnoStatus(int error, absl::string_view what, const std::string& path) {
  std::string message = absl::StrCat(what, " '", path, "': ", std::strerror(error));
  if (error == ENOENT) {
    return absl::NotFoundError(message);
  }
  if (error == EACCES) {
    return absl::PermissionDeniedError(message);
  }
  return absl::UnavailableError(message);
}

// What a file that is not a regular one is, for the message.
const char* KindOf(mode_t mode) {
  if (S_ISFIFO(mode)) {
    return "a FIFO";
  }
  if (S_ISCHR(mode)) {
    return "a character device";
  }
  if (S_ISBLK(mode)) {
    return "a block device";
  }
  if (S_ISSOCK(mode)) {
    return "a socket";
  }
  if (S_ISDIR(mode)) {
    return "a directory";
  }
  return "not a regular file";
}

// Checks `fd` (opened from `path`) and reads it whole. `limit`: for the
// ReadRegularFile kind (regular files of at most *limit); none for
// ReadFileToString (any file, any size).
absl::StatusOr<std::string> ReadWhole(const UniqueFd& fd, const std::string& path,
                                      std::optional<uint64_t> limit) {
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) {
    return ErrnoStatus(errno, "cannot stat", path);
  }
  if (limit && !S_ISREG(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", path, "' is ", KindOf(info.st_mode), ", not a regular file; not read"));
  }
  const uint64_t max_bytes = limit.value_or(std::numeric_limits<uint64_t>::max() - 1);
  const auto too_large = [&](uint64_t bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", path, "' holds ", bytes, " bytes, more than the limit of ", max_bytes, "; not read"));
  };
  if (static_cast<uint64_t>(info.st_size) > max_bytes) {
    return too_large(static_cast<uint64_t>(info.st_size));
  }
  // One fstat and reads straight into a string of the file's size (samples
  // are read on the data server's hot path), plus one byte: a read that
  // fills it means the file grew since.
  std::string contents(static_cast<size_t>(info.st_size) + 1, '\0');
  size_t done = 0;
  while (true) {
    if (done == contents.size()) {
      if (done > max_bytes) {
        return too_large(done);
      }
      contents.resize(std::min<uint64_t>(max_bytes + 1, done + std::max<size_t>(4096, done)));
    }
    const ssize_t n = ::read(fd.get(), contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return ErrnoStatus(errno, "cannot read", path);
    }
    if (n == 0) {
      break;
    }
    done += static_cast<size_t>(n);
  }
  contents.resize(done);
  return contents;
}

// O_NONBLOCK: opening a FIFO would otherwise wait for a writer.
constexpr int kOpenRegularFlags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;

}  // namespace

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, uint64_t max_bytes) {
  const UniqueFd fd(::open(path.c_str(), kOpenRegularFlags));
  if (!fd.valid()) {
    return ErrnoStatus(errno, "cannot open", path);
  }
  return ReadWhole(fd, path, max_bytes);
}

absl::StatusOr<std::string> ReadRegularFileBeneath(int root_fd, const std::string& path,
                                                   uint64_t max_bytes) {
  open_how how{};
  how.flags = kOpenRegularFlags;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  UniqueFd fd(static_cast<int>(::syscall(SYS_openat2, root_fd, path.c_str(), &how, sizeof(how))));
  if (!fd.valid() && (errno == ENOSYS || errno == EPERM)) {
    // A kernel before 5.6, or a seccomp policy that does not know openat2:
    // the path was checked lexically by the caller; the file itself must
    // not be a symlink.
    fd = UniqueFd(::openat(root_fd, path.c_str(), kOpenRegularFlags | O_NOFOLLOW));
  }
  if (!fd.valid()) {
    if (errno == EXDEV || errno == ELOOP) {
      return absl::PermissionDeniedError(
          absl::StrCat("'", path, "' leads outside the dataset root; not read"));
    }
    return ErrnoStatus(errno, "cannot open", path);
  }
  return ReadWhole(fd, path, max_bytes);
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    return ErrnoStatus(errno, "cannot open", path);
  }
  return ReadWhole(fd, path, std::nullopt);
}

}  // namespace heterodl
