#include "src/data/shard_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/common/net/unique_fd.h"
#include "src/common/status_macros.h"

namespace heterodl {
namespace {

// A shard on local disk, read with pread.
class LocalShardFile : public ShardFile {
 public:
  LocalShardFile(std::string path, UniqueFd fd, uint64_t size)
      : path_(std::move(path)), fd_(std::move(fd)), size_(size) {}

  absl::StatusOr<std::string> ReadAt(uint64_t offset, uint64_t size) const override {
    std::string bytes(size, '\0');
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::pread(fd_.get(), bytes.data() + done, bytes.size() - done,
                                static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n <= 0) {
        return absl::UnavailableError(
            absl::StrCat("cannot read '", path_, "': ",
                         n == 0 ? "shard is shorter than its index (changed since opened?)"
                                : std::strerror(errno)));
      }
      done += static_cast<size_t>(n);
    }
    return bytes;
  }
  uint64_t size() const override { return size_; }
  const std::string& name() const override { return path_; }
  uint64_t index_chunk_bytes() const override { return uint64_t{1} << 16; }

 private:
  const std::string path_;
  const UniqueFd fd_;
  const uint64_t size_;
};

// A shard in object storage, read with range GETs: of the bytes asked for,
// or (with `chunks`, once Preload asked for them) of whole chunks kept in
// memory.
class ObjectShardFile : public ShardFile {
 public:
  ObjectShardFile(std::shared_ptr<S3Client> s3, ObjectUrl url, uint64_t size,
                  std::shared_ptr<ShardChunks> chunks)
      : s3_(std::move(s3)),
        url_(std::move(url)),
        name_(url_.ToString()),
        size_(size),
        chunks_(std::move(chunks)),
        chunk_file_(chunks_ != nullptr ? chunks_->NewFile() : 0) {}

  absl::StatusOr<std::string> ReadAt(uint64_t offset, uint64_t size) const override {
    if (std::optional<std::string> held = FromChunks(offset, size)) {
      return *std::move(held);
    }
    return ReadRange(offset, size);
  }

  absl::Status Preload(uint64_t offset, uint64_t size) const override {
    if (chunks_ == nullptr || size == 0 || offset >= size_) {
      return absl::OkStatus();
    }
    const uint64_t chunk_bytes = chunks_->chunk_bytes();
    const uint64_t last = (std::min(offset + size, size_) - 1) / chunk_bytes;
    for (uint64_t chunk = offset / chunk_bytes; chunk <= last; ++chunk) {
      const uint64_t begin = chunk * chunk_bytes;
      RETURN_IF_ERROR(
          chunks_
              ->Load(chunk_file_, chunk,
                     [&] { return ReadRange(begin, std::min(chunk_bytes, size_ - begin)); })
              .status());
    }
    return absl::OkStatus();
  }

  uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }
  // Indexing reads the whole shard once: few, large requests.
  uint64_t index_chunk_bytes() const override { return uint64_t{16} << 20; }

 private:
  absl::StatusOr<std::string> ReadRange(uint64_t offset, uint64_t size) const {
    absl::StatusOr<std::string> bytes = s3_->Get(url_, offset, size);
    if (bytes.ok() && bytes->size() != size) {
      return absl::UnavailableError(absl::StrCat("cannot read '", name_, "': ", bytes->size(),
                                                 " bytes of ", size, " at ", offset,
                                                 " (shorter than its index: changed?)"));
    }
    return bytes;
  }

  // The bytes from the chunks in memory, when every one they lie in is.
  std::optional<std::string> FromChunks(uint64_t offset, uint64_t size) const {
    if (chunks_ == nullptr || size == 0 || offset + size > size_) {
      return std::nullopt;
    }
    const uint64_t chunk_bytes = chunks_->chunk_bytes();
    std::string bytes;
    bytes.reserve(size);
    for (uint64_t at = offset; at < offset + size;) {
      const uint64_t chunk = at / chunk_bytes;
      const ShardChunks::Chunk held = chunks_->Find(chunk_file_, chunk);
      if (held == nullptr) {
        return std::nullopt;
      }
      const uint64_t within = at - chunk * chunk_bytes;
      const uint64_t take = std::min<uint64_t>(held->size() - within, offset + size - at);
      bytes.append(*held, within, take);
      at += take;
    }
    return bytes;
  }

  const std::shared_ptr<S3Client> s3_;
  const ObjectUrl url_;
  const std::string name_;
  const uint64_t size_;
  const std::shared_ptr<ShardChunks> chunks_;
  const uint64_t chunk_file_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ShardFile>> OpenLocalShardFile(std::string path,
                                                              absl::string_view what) {
  // O_NONBLOCK: a FIFO named like a shard must not hold the server.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  struct stat info {};
  const int error = errno;
  const bool regular = fd.valid() && ::fstat(fd.get(), &info) == 0 && S_ISREG(info.st_mode);
  if (!regular) {
    if (fd.valid()) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, " '", path, "' is not a regular file"));
    }
    return absl::NotFoundError(
        absl::StrCat("cannot open ", what, " '", path, "': ", std::strerror(error)));
  }
  return std::make_unique<LocalShardFile>(std::move(path), std::move(fd),
                                          static_cast<uint64_t>(info.st_size));
}

std::unique_ptr<ShardFile> OpenObjectShardFile(std::shared_ptr<S3Client> s3, ObjectUrl url,
                                               uint64_t size, std::shared_ptr<ShardChunks> chunks) {
  return std::make_unique<ObjectShardFile>(std::move(s3), std::move(url), size, std::move(chunks));
}

}  // namespace heterodl
