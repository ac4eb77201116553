#include "src/common/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

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

}  // namespace

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, uint64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    return ErrnoStatus(errno, "cannot open", path);
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    return ErrnoStatus(error, "cannot stat", path);
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("'", path, "' is ", KindOf(info.st_mode), ", not a regular file; not read"));
  }
  const auto too_large = [&](uint64_t bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", path, "' holds ", bytes, " bytes, more than the limit of ", max_bytes, "; not read"));
  };
  if (static_cast<uint64_t>(info.st_size) > max_bytes) {
    ::close(fd);
    return too_large(static_cast<uint64_t>(info.st_size));
  }
  // One byte more than the file's size: a read that fills it means the file
  // grew since fstat.
  std::string contents(static_cast<size_t>(info.st_size) + 1, '\0');
  size_t done = 0;
  while (true) {
    if (done == contents.size()) {
      if (done > max_bytes) {
        ::close(fd);
        return too_large(done);
      }
      contents.resize(std::min<uint64_t>(max_bytes + 1, done + std::max<size_t>(4096, done)));
    }
    const ssize_t n = ::read(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      return ErrnoStatus(error, "cannot read", path);
    }
    if (n == 0) {
      break;
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  contents.resize(done);
  return contents;
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  // One fstat and reads straight into a string of the file's size: samples
  // are read on the data server's hot path.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return ErrnoStatus(errno, "cannot open", path);
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    return ErrnoStatus(error, "cannot stat", path);
  }
  std::string contents(static_cast<size_t>(info.st_size), '\0');
  size_t done = 0;
  while (true) {
    if (done == contents.size()) {
      contents.resize(done + std::max<size_t>(4096, done));  // grew
    }
    const ssize_t n = ::read(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      return ErrnoStatus(error, "cannot read", path);
    }
    if (n == 0) {
      break;
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  contents.resize(done);
  return contents;
}

}  // namespace heterodl
