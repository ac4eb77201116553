#include "src/common/read_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace heterodl {
namespace {

absl::Status ErrnoStatus(int error, absl::string_view what, const std::string& path) {
  std::string message = absl::StrCat(what, " '", path, "': ", std::strerror(error));
  if (error == ENOENT) return absl::NotFoundError(message);
  if (error == EACCES) return absl::PermissionDeniedError(message);
  return absl::UnavailableError(message);
}

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return ErrnoStatus(errno, "cannot open", path);
  std::ostringstream contents;
  contents << file.rdbuf();
  if (file.bad()) return ErrnoStatus(errno, "cannot read", path);
  return std::move(contents).str();
}

}  // namespace heterodl
