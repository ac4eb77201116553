// Object storage URLs: `s3://BUCKET/KEY` (a key, or a prefix of keys),
// what every dataset flag accepts beside a local path.
//
//   if (IsObjectUrl(path)) {
//     ASSIGN_OR_RETURN(ObjectUrl url, ParseObjectUrl(path));
//     // url.bucket "my-data", url.key "imagenet/train/"
//   }
#ifndef HETERODL_SRC_STORAGE_OBJECT_URL_H_
#define HETERODL_SRC_STORAGE_OBJECT_URL_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace heterodl {

struct ObjectUrl {
  std::string bucket;
  // A key, a prefix, or empty (the whole bucket). Never starts with '/'.
  std::string key;

  std::string ToString() const;  // "s3://bucket/key"
  // The URL of `relative` below this one taken as a folder: "s3://b/p/" +
  // "x/y.jpg" -> "s3://b/p/x/y.jpg" (a '/' put between when missing).
  ObjectUrl Child(absl::string_view relative) const;
  // The folder of this key ("s3://b/p/list.txt" -> "s3://b/p/").
  ObjectUrl Folder() const;
  bool operator==(const ObjectUrl& other) const {
    return bucket == other.bucket && key == other.key;
  }
};

// Whether `path` names object storage (starts with "s3://") rather than a
// local path.
bool IsObjectUrl(absl::string_view path);

// INVALID_ARGUMENT naming `url` unless it is s3://BUCKET[/KEY] with a
// bucket name S3 allows (3 to 63 of [a-z0-9.-], starting and ending with a
// letter or digit).
absl::StatusOr<ObjectUrl> ParseObjectUrl(absl::string_view url);

}  // namespace heterodl

#endif  // HETERODL_SRC_STORAGE_OBJECT_URL_H_
