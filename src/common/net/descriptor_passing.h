// Passing file descriptors over a Unix socket (SCM_RIGHTS) along with bytes:
// how a data server hands a same-host loader the memfd of a batch's region
// (src/wire/pixel_channel.h).
//
//   ssize_t n = SendWithDescriptor(socket, record, sizeof(record), memfd);
//   ...
//   ReceivedBytes got = ReceiveWithDescriptors(socket, buffer, sizeof(buffer));
//   if (got.bytes > 0 && !got.descriptors.empty()) Map(got.descriptors[0]);
#ifndef HETERODL_SRC_COMMON_NET_DESCRIPTOR_PASSING_H_
#define HETERODL_SRC_COMMON_NET_DESCRIPTOR_PASSING_H_

#include <sys/types.h>

#include <cstddef>
#include <vector>

#include "src/common/net/unique_fd.h"

namespace heterodl {

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

#endif  // HETERODL_SRC_COMMON_NET_DESCRIPTOR_PASSING_H_
