#include "src/common/net/unix_socket.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace heterodl {
namespace {

// One buffer of bytes and room for one descriptor: what each call passes.
struct Message {
  Message(void* data, size_t size) : part{data, size} {
    header.msg_iov = &part;
    header.msg_iovlen = 1;
    header.msg_control = control;
    header.msg_controllen = sizeof(control);
  }
  Message(const Message&) = delete;
  Message& operator=(const Message&) = delete;

  iovec part;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr header{};
};

}  // namespace

absl::StatusOr<AbstractAddress> AbstractSocketAddress(absl::string_view name) {
  AbstractAddress where;
  where.address.sun_family = AF_UNIX;
  if (name.empty() || name.size() + 1 > sizeof(where.address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("not an abstract socket name: '", name, "'"));
  }
  std::memcpy(where.address.sun_path + 1, name.data(), name.size());
  where.length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return where;
}

ssize_t SendWithDescriptor(int socket, const void* data, size_t size, int descriptor) {
  Message outgoing(const_cast<void*>(data), size);
  msghdr& message = outgoing.header;
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(header), &descriptor, sizeof(int));
  return ::sendmsg(socket, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
}

ReceivedBytes ReceiveWithDescriptors(int socket, void* data, size_t size) {
  Message incoming(data, size);
  msghdr& message = incoming.header;
  ReceivedBytes received;
  received.bytes = ::recvmsg(socket, &message, MSG_CMSG_CLOEXEC);
  received.error = received.bytes < 0 ? errno : 0;
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
       header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) {
      continue;
    }
    const size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
      received.descriptors.emplace_back(fd);
    }
  }
  received.truncated = (message.msg_flags & MSG_CTRUNC) != 0;
  return received;
}

}  // namespace heterodl
