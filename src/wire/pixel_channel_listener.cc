#include "src/wire/pixel_channel_listener.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "src/common/log.h"
#include "src/common/net/unique_fd.h"
#include "src/wire/tcp_address.h"

namespace heterodl {
namespace {

// One channel's writes per turn of the loop, so a fast loader cannot keep the
// thread from the others.
constexpr size_t kMaxBytesPerTurn = 8 << 20;

struct QueuedPixels {
  OutgoingPixels pixels;
  size_t offset = 0;
  PixelChannel::SentCallback sent;
};

// The state of all channels of one listener, and its epoll thread's work.
// Only that thread closes sockets, erases channels or pops sent pixels, so it
// may call send() without holding mu_ on pixels it has looked up under mu_.
class ListenerCore {
 public:
  ListenerCore(UniqueFd listen_socket, UniqueFd epoll, UniqueFd wake, PixelChannelLimits limits)
      : listen_socket_(std::move(listen_socket)),
        epoll_(std::move(epoll)),
        wake_(std::move(wake)),
        limits_(limits) {}

  // The epoll thread: runs until Stop(), then breaks every channel.
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  void Stop() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    WakeLocked();
  }

  absl::StatusOr<uint64_t> Claim(const PixelTicket& ticket) ABSL_LOCKS_EXCLUDED(mu_);
  void Send(uint64_t channel, OutgoingPixels pixels, PixelChannel::SentCallback sent)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Close(uint64_t channel) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct ChannelState {
    PixelTicket ticket{};
    UniqueFd socket;  // none until the loader's connection arrives
    absl::Time attach_deadline;
    std::deque<QueuedPixels> queue;
    bool writable = false;
    bool close_requested = false;
  };
  // A connection not paired with a stream: still sending its hello, or
  // waiting for its ticket to be claimed.
  struct Unpaired {
    UniqueFd socket;
    uint8_t hello[kPixelChannelHelloBytes] = {};
    size_t received = 0;
    absl::Time deadline;
  };

  void WakeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof(one));
  }
  void AcceptAll() ABSL_LOCKS_EXCLUDED(mu_);
  void HandleEvent(int fd, uint32_t events) ABSL_LOCKS_EXCLUDED(mu_);
  void ReadHelloLocked(int fd, Unpaired& unpaired) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AttachLocked(uint64_t channel, UniqueFd socket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the unpaired connection on `fd` out of unpaired_.
  UniqueFd TakeUnpairedLocked(int fd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CloseUnpairedLocked(int fd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the channel's queued pixels, closes its socket and forgets it;
  // logs `why` unless empty.
  void BreakLocked(uint64_t channel, const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes what was asked to close and what missed its deadline.
  void SweepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes what the writable channels have queued; true when some channel
  // still has writable work (the loop then polls without sleeping).
  bool FlushAll() ABSL_LOCKS_EXCLUDED(mu_);
  void Flush(uint64_t channel) ABSL_LOCKS_EXCLUDED(mu_);
  void RunCallbacks() ABSL_LOCKS_EXCLUDED(mu_);

  // Used by the epoll thread only, closed when it ends (so the port is free
  // even while channels still refer to this core).
  UniqueFd listen_socket_;
  UniqueFd epoll_;
  // Written from any thread under mu_, read by the epoll thread.
  const UniqueFd wake_;
  const PixelChannelLimits limits_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_channel_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, ChannelState> channels_ ABSL_GUARDED_BY(mu_);
  std::map<PixelTicket, uint64_t> claimed_ ABSL_GUARDED_BY(mu_);  // of open channels
  std::map<int, Unpaired> unpaired_ ABSL_GUARDED_BY(mu_);         // by socket descriptor
  std::map<PixelTicket, int> presented_ ABSL_GUARDED_BY(mu_);     // unclaimed ticket -> socket
  std::map<int, uint64_t> attached_ ABSL_GUARDED_BY(mu_);         // socket -> channel
  // Callbacks owed, run by the loop outside mu_.
  std::vector<std::pair<PixelChannel::SentCallback, bool>> callbacks_ ABSL_GUARDED_BY(mu_);
};

void ListenerCore::Run() {
  epoll_event events[64];
  bool busy = false;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    const int count = epoll_wait(epoll_.get(), events, 64, busy ? 0 : 100);
    for (int i = 0; i < count; ++i) HandleEvent(events[i].data.fd, events[i].events);
    {
      absl::MutexLock lock(&mu_);
      SweepLocked();
    }
    busy = FlushAll();
    RunCallbacks();
  }
  {
    absl::MutexLock lock(&mu_);
    while (!channels_.empty()) BreakLocked(channels_.begin()->first, "");
    while (!unpaired_.empty()) CloseUnpairedLocked(unpaired_.begin()->first);
    stopped_ = true;
  }
  RunCallbacks();
  listen_socket_.reset();
  epoll_.reset();
}

void ListenerCore::HandleEvent(int fd, uint32_t events) {
  if (fd == listen_socket_.get()) return AcceptAll();
  if (fd == wake_.get()) {
    uint64_t count = 0;
    (void)!::read(wake_.get(), &count, sizeof(count));
    return;
  }
  absl::MutexLock lock(&mu_);
  if (auto it = unpaired_.find(fd); it != unpaired_.end()) return ReadHelloLocked(fd, it->second);
  auto it = attached_.find(fd);
  if (it == attached_.end()) return;
  const uint64_t channel = it->second;
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
    // A loader sends nothing after its hello: this is its end of the
    // connection, as when it cancels the stream (which says why, if anything
    // went wrong), or a protocol error.
    uint8_t byte;
    const ssize_t n = ::recv(fd, &byte, 1, MSG_DONTWAIT);
    if (n > 0) return BreakLocked(channel, "a loader sent bytes on its pixel channel; closed");
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      return BreakLocked(channel, "");
    }
  }
  if (events & EPOLLOUT) channels_[channel].writable = true;
}

void ListenerCore::AcceptAll() {
  while (true) {
    UniqueFd socket(::accept4(listen_socket_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!socket.valid()) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        LogWarning("pixel channel port: accept: %s", ErrnoText(errno));
      }
      return;
    }
    absl::MutexLock lock(&mu_);
    if (unpaired_.size() >= static_cast<size_t>(limits_.max_unpaired)) {
      LogWarning("pixel channel port: %d connections not paired with a stream; refusing more",
                 unpaired_.size());
      continue;  // closed with `socket`
    }
    epoll_event event{};
    event.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    event.data.fd = socket.get();
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, socket.get(), &event) != 0) continue;
    Unpaired& unpaired = unpaired_[socket.get()];
    unpaired.deadline = absl::Now() + limits_.attach_timeout;
    unpaired.socket = std::move(socket);
  }
}

void ListenerCore::ReadHelloLocked(int fd, Unpaired& unpaired) {
  const bool was_presented = unpaired.received == kPixelChannelHelloBytes;
  while (unpaired.received < kPixelChannelHelloBytes) {
    const ssize_t n = ::recv(fd, unpaired.hello + unpaired.received,
                             kPixelChannelHelloBytes - unpaired.received, MSG_DONTWAIT);
    if (n > 0) {
      unpaired.received += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    return CloseUnpairedLocked(fd);  // gone before pairing
  }
  // Bytes after the hello, or the connection's end: either way it is done.
  uint8_t byte;
  const bool ended = ::recv(fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK) >= 0;
  if (was_presented) {
    if (ended) CloseUnpairedLocked(fd);
    return;
  }
  if (std::memcmp(unpaired.hello, kPixelChannelMagic, sizeof(kPixelChannelMagic)) != 0) {
    LogWarning("pixel channel port: a connection without the protocol's greeting; closed");
    return CloseUnpairedLocked(fd);
  }
  PixelTicket ticket;
  std::memcpy(ticket.data(), unpaired.hello + sizeof(kPixelChannelMagic), ticket.size());
  if (auto claimed = claimed_.find(ticket); claimed != claimed_.end()) {
    const uint64_t channel = claimed->second;
    if (channels_[channel].socket.valid()) return CloseUnpairedLocked(fd);  // a second one
    AttachLocked(channel, TakeUnpairedLocked(fd));
    // A loader already gone breaks its channel now, not at the deadline.
    if (ended) BreakLocked(channel, "");
    return;
  }
  if (ended) return CloseUnpairedLocked(fd);
  if (auto [it, inserted] = presented_.emplace(ticket, fd); !inserted && it->second != fd) {
    return CloseUnpairedLocked(fd);  // the ticket is taken
  }
  unpaired.deadline = absl::Now() + limits_.attach_timeout;
}

void ListenerCore::AttachLocked(uint64_t channel, UniqueFd socket) {
  ChannelState& state = channels_[channel];
  attached_[socket.get()] = channel;
  state.socket = std::move(socket);
  state.writable = true;  // a fresh socket; EPOLLOUT says when it is again
}

UniqueFd ListenerCore::TakeUnpairedLocked(int fd) {
  auto it = unpaired_.find(fd);
  UniqueFd socket = std::move(it->second.socket);
  unpaired_.erase(it);
  return socket;
}

void ListenerCore::CloseUnpairedLocked(int fd) {
  auto it = unpaired_.find(fd);
  if (it == unpaired_.end()) return;
  if (it->second.received == kPixelChannelHelloBytes) {
    PixelTicket ticket;
    std::memcpy(ticket.data(), it->second.hello + sizeof(kPixelChannelMagic), ticket.size());
    if (auto presented = presented_.find(ticket);
        presented != presented_.end() && presented->second == fd) {
      presented_.erase(presented);
    }
  }
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  unpaired_.erase(it);  // closes the socket
}

void ListenerCore::BreakLocked(uint64_t channel, const std::string& why) {
  auto it = channels_.find(channel);
  if (it == channels_.end()) return;
  ChannelState& state = it->second;
  if (!why.empty()) LogWarning("%s", why);
  for (QueuedPixels& queued : state.queue) callbacks_.emplace_back(std::move(queued.sent), false);
  if (state.socket.valid()) {
    attached_.erase(state.socket.get());
    epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, state.socket.get(), nullptr);
  }
  claimed_.erase(state.ticket);
  channels_.erase(it);  // closes the socket
}

void ListenerCore::SweepLocked() {
  const absl::Time now = absl::Now();
  std::vector<uint64_t> to_break;
  for (const auto& [id, state] : channels_) {
    if (state.close_requested || (!state.socket.valid() && now > state.attach_deadline)) {
      to_break.push_back(id);
    }
  }
  for (uint64_t id : to_break) {
    const bool late = !channels_[id].close_requested;
    BreakLocked(id, late
                        ? absl::StrCat("a loader's pixel channel connection did not arrive within ",
                                       absl::FormatDuration(limits_.attach_timeout))
                        : "");
  }
  std::vector<int> expired;
  for (const auto& [fd, unpaired] : unpaired_) {
    if (now > unpaired.deadline) expired.push_back(fd);
  }
  for (int fd : expired) CloseUnpairedLocked(fd);
}

bool ListenerCore::FlushAll() {
  std::vector<uint64_t> ready;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, state] : channels_) {
      if (state.socket.valid() && state.writable && !state.queue.empty()) ready.push_back(id);
    }
  }
  for (uint64_t id : ready) Flush(id);
  absl::MutexLock lock(&mu_);
  for (const auto& [id, state] : channels_) {
    if (state.socket.valid() && state.writable && !state.queue.empty()) return true;
  }
  return false;
}

void ListenerCore::Flush(uint64_t channel) {
  size_t written = 0;
  while (written < kMaxBytesPerTurn) {
    int fd;
    const uint8_t* data;
    size_t size;
    {
      absl::MutexLock lock(&mu_);
      auto it = channels_.find(channel);
      if (it == channels_.end() || !it->second.writable || it->second.queue.empty()) return;
      const QueuedPixels& front = it->second.queue.front();
      fd = it->second.socket.get();
      data = front.pixels.data + front.offset;
      size = front.pixels.size - front.offset;
    }
    // Outside mu_: only this thread pops the queue or closes the socket.
    const ssize_t n = size == 0 ? 0 : ::send(fd, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    const int error = errno;
    absl::MutexLock lock(&mu_);
    ChannelState& state = channels_[channel];
    if (n < 0) {
      if (error == EINTR) continue;
      if (error == EAGAIN || error == EWOULDBLOCK) {
        state.writable = false;
        return;
      }
      // The loader's end going away is its stream's business; other errors
      // are worth a line.
      const bool peer_gone = error == EPIPE || error == ECONNRESET;
      return BreakLocked(channel,
                         peer_gone ? "" : absl::StrCat("pixel channel send: ", ErrnoText(error)));
    }
    written += static_cast<size_t>(n);
    QueuedPixels& front = state.queue.front();
    front.offset += static_cast<size_t>(n);
    if (front.offset == front.pixels.size) {
      callbacks_.emplace_back(std::move(front.sent), true);
      state.queue.pop_front();
    }
  }
}

void ListenerCore::RunCallbacks() {
  std::vector<std::pair<PixelChannel::SentCallback, bool>> callbacks;
  {
    absl::MutexLock lock(&mu_);
    callbacks.swap(callbacks_);
  }
  for (auto& [callback, sent] : callbacks) {
    if (callback) callback(sent);
  }
}

absl::StatusOr<uint64_t> ListenerCore::Claim(const PixelTicket& ticket) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("the pixel channel port is closing");
  if (claimed_.count(ticket) > 0) {
    return absl::AlreadyExistsError("pixel channel ticket claimed twice");
  }
  const uint64_t channel = next_channel_++;
  ChannelState& state = channels_[channel];
  state.ticket = ticket;
  state.attach_deadline = absl::Now() + limits_.attach_timeout;
  claimed_[ticket] = channel;
  if (auto presented = presented_.find(ticket); presented != presented_.end()) {
    const int fd = presented->second;
    presented_.erase(presented);
    AttachLocked(channel, TakeUnpairedLocked(fd));
    WakeLocked();
  }
  return channel;
}

void ListenerCore::Send(uint64_t channel, OutgoingPixels pixels, PixelChannel::SentCallback sent) {
  absl::MutexLock lock(&mu_);
  // After the loop has stopped nothing would run the callback: it is dropped
  // (the listener outlives the streams that send, see data_server.cc).
  if (stopped_) return;
  auto it = channels_.find(channel);
  if (it == channels_.end() || it->second.close_requested) {
    callbacks_.emplace_back(std::move(sent), false);
  } else {
    it->second.queue.push_back({std::move(pixels), 0, std::move(sent)});
  }
  WakeLocked();
}

void ListenerCore::Close(uint64_t channel) {
  absl::MutexLock lock(&mu_);
  auto it = channels_.find(channel);
  if (it == channels_.end()) return;
  it->second.close_requested = true;
  WakeLocked();
}

class EpollPixelChannel final : public PixelChannel {
 public:
  EpollPixelChannel(std::shared_ptr<ListenerCore> core, uint64_t id)
      : core_(std::move(core)), id_(id) {}
  ~EpollPixelChannel() override { core_->Close(id_); }

  void Send(OutgoingPixels pixels, SentCallback sent) override {
    core_->Send(id_, std::move(pixels), std::move(sent));
  }
  void Close() override { core_->Close(id_); }

 private:
  const std::shared_ptr<ListenerCore> core_;
  const uint64_t id_;
};

class EpollPixelChannelListener final : public PixelChannelListener {
 public:
  EpollPixelChannelListener(std::shared_ptr<ListenerCore> core, int port)
      : core_(std::move(core)), port_(port), thread_([core = core_] { core->Run(); }) {}
  ~EpollPixelChannelListener() override {
    core_->Stop();
    thread_.join();
  }

  int port() const override { return port_; }

  absl::StatusOr<std::shared_ptr<PixelChannel>> Claim(const PixelTicket& ticket) override {
    absl::StatusOr<uint64_t> id = core_->Claim(ticket);
    if (!id.ok()) return id.status();
    return std::make_shared<EpollPixelChannel>(core_, *id);
  }

 private:
  const std::shared_ptr<ListenerCore> core_;
  const int port_;
  std::thread thread_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PixelChannelListener>> PixelChannelListener::Listen(
    const std::string& host, int port, PixelChannelLimits limits) {
  const std::string where = absl::StrCat(host, ":", port);
  absl::StatusOr<AddressInfo> addresses = ResolveTcp(host, port, /*passive=*/true);
  if (!addresses.ok()) return addresses.status();
  // IPv4 first: "localhost" then binds where most clients look first.
  const addrinfo* chosen = addresses->get();
  for (const addrinfo* a = addresses->get(); a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      chosen = a;
      break;
    }
  }
  UniqueFd socket(::socket(chosen->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  const int one = 1;
  const int fd = socket.get();
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      ::bind(fd, chosen->ai_addr, chosen->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
    const int error = errno;
    return absl::UnavailableError(
        absl::StrCat("cannot listen for pixel channels on ", where, ": ", ErrnoText(error)));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  const int bound_port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  UniqueFd epoll(epoll_create1(EPOLL_CLOEXEC));
  UniqueFd wake(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  epoll_event listen_event{};
  listen_event.events = EPOLLIN | EPOLLET;
  listen_event.data.fd = fd;
  epoll_event wake_event{};
  wake_event.events = EPOLLIN;
  wake_event.data.fd = wake.get();
  if (!epoll.valid() || !wake.valid() ||
      epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &listen_event) != 0 ||
      epoll_ctl(epoll.get(), EPOLL_CTL_ADD, wake.get(), &wake_event) != 0) {
    return absl::UnavailableError(absl::StrCat("pixel channel port: epoll: ", ErrnoText(errno)));
  }
  return std::make_unique<EpollPixelChannelListener>(
      std::make_shared<ListenerCore>(std::move(socket), std::move(epoll), std::move(wake), limits),
      bound_port);
}

}  // namespace heterodl
