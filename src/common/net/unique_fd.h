// UniqueFd: owns a file descriptor and closes it when destroyed or reset, as
// std::unique_ptr owns memory. Move-only.
//
//   UniqueFd socket(::socket(AF_INET, SOCK_STREAM, 0));
//   if (!socket.valid()) return Error(errno);
//   ... on every return path the socket is closed, unless released.
#ifndef HETERODL_SRC_COMMON_NET_UNIQUE_FD_H_
#define HETERODL_SRC_COMMON_NET_UNIQUE_FD_H_

#include <unistd.h>

#include <utility>

namespace heterodl {

class UniqueFd {
 public:
  UniqueFd() = default;
  // Takes `fd` (a negative one: owns nothing).
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives the descriptor up without closing it.
  int release() { return std::exchange(fd_, -1); }
  // Closes what it owns and takes `fd`.
  void reset(int fd = -1) {
    if (fd_ >= 0) {
      ::close(fd_);
    }
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_COMMON_NET_UNIQUE_FD_H_
