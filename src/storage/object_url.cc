#include "src/storage/object_url.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace heterodl {
namespace {

constexpr absl::string_view kScheme = "s3://";

bool IsBucketName(absl::string_view name) {
  if (name.size() < 3 || name.size() > 63) {
    return false;
  }
  for (const char c : name) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '.' && c != '-') {
      return false;
    }
  }
  return absl::ascii_isalnum(name.front()) && absl::ascii_isalnum(name.back());
}

}  // namespace

std::string ObjectUrl::ToString() const { return absl::StrCat(kScheme, bucket, "/", key); }

ObjectUrl ObjectUrl::Child(absl::string_view relative) const {
  relative = absl::StripPrefix(relative, "/");
  if (key.empty() || absl::EndsWith(key, "/")) {
    return {bucket, absl::StrCat(key, relative)};
  }
  return {bucket, absl::StrCat(key, "/", relative)};
}

ObjectUrl ObjectUrl::Folder() const {
  const size_t slash = key.rfind('/');
  return {bucket, slash == std::string::npos ? "" : key.substr(0, slash + 1)};
}

bool IsObjectUrl(absl::string_view path) { return absl::StartsWith(path, kScheme); }

absl::StatusOr<ObjectUrl> ParseObjectUrl(absl::string_view url) {
  if (!IsObjectUrl(url)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", url, "' is not an object storage URL (s3://BUCKET/KEY)"));
  }
  absl::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  ObjectUrl parsed;
  parsed.bucket = std::string(rest.substr(0, slash));
  if (slash != absl::string_view::npos) {
    parsed.key = std::string(rest.substr(slash + 1));
  }
  if (!IsBucketName(parsed.bucket)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", url, "': '", parsed.bucket,
                     "' is not a bucket name (3 to 63 lower-case letters, digits, '.' and '-')"));
  }
  if (absl::StartsWith(parsed.key, "/")) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", url, "': a key does not start with '/' (s3://BUCKET/KEY)"));
  }
  return parsed;
}

}  // namespace heterodl
