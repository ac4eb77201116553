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

}  // namespace

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
