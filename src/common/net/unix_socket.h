// Unix sockets for same-host pixel channels (src/wire/pixel_channel.h):
// abstract addresses (a name, no file), and passing file descriptors along
// with bytes (SCM_RIGHTS), how a data server hands a same-host loader the
// memfd of a batch's region.
//
//   ASSIGN_OR_RETURN(AbstractAddress where, AbstractSocketAddress(name));
//   ::connect(socket, where.as_sockaddr(), where.length);
//   ssize_t n = SendWithDescriptor(socket, record, sizeof(record), memfd);
//   ...
//   ReceivedBytes got = ReceiveWithDescriptors(socket, buffer, sizeof(buffer));
//   if (got.bytes > 0 && !got.descriptors.empty()) Map(got.descriptors[0]);
#ifndef HETERODL_SRC_COMMON_NET_UNIX_SOCKET_H_
#define HETERODL_SRC_COMMON_NET_UNIX_SOCKET_H_

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/common/net/unique_fd.h"

namespace heterodl {

// The address of the abstract Unix socket `name` (stored after a leading
// NUL; it exists only in its network namespace, and goes with its socket).
struct AbstractAddress {
  sockaddr_un address{};
  socklen_t length = 0;
  const sockaddr* as_sockaddr() const { return reinterpret_cast<const sockaddr*>(&address); }
};
// INVALID_ARGUMENT for an empty name or one longer than an address holds.
absl::StatusOr<AbstractAddress> AbstractSocketAddress(absl::string_view name);

// send() of `size` bytes with `descriptor` attached to the first of them,
// without blocking and without SIGPIPE. Returns send()'s result (errno set
// on -1); the descriptor went along when it returns more than 0.
ssize_t SendWithDescriptor(int socket, const void* data, size_t size, int descriptor);

struct ReceivedBytes {
  ssize_t bytes = 0;  // recvmsg()'s result: -1 with errno set, 0 at the end
  int error = 0;      // errno when bytes < 0
  // What came with them (owned: closed unless kept). More than the room for
  // one sets `truncated`, and the kernel closes the rest.
  std::vector<UniqueFd> descriptors;
  bool truncated = false;
};

// One blocking recvmsg() of at most `size` bytes, taking the descriptors
// that come with them (close-on-exec).
ReceivedBytes ReceiveWithDescriptors(int socket, void* data, size_t size);

}  // namespace heterodl

#endif  // HETERODL_SRC_COMMON_NET_UNIX_SOCKET_H_
