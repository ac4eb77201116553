#include "src/server/pixel_channel_listener.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "src/common/log.h"
#include "src/common/net/tcp_address.h"
#include "src/common/net/unique_fd.h"
#include "src/common/net/unix_socket.h"
#include "src/common/status_macros.h"
#include "src/server/pixel_channel_pairing.h"
#include "src/server/pixel_sender.h"

namespace heterodl {
namespace {

// One channel's writes per turn of the loop, so a fast loader cannot keep the
// thread from the others.
constexpr size_t kMaxBytesPerTurn = 8 << 20;

// The state of all channels of one listener, and its epoll thread's work:
// accepting, pairing connections with streams by ticket, deadlines, and
// writing. What a channel writes next is its PixelSender's (TCP or same
// host, src/server/pixel_sender.h). Only the epoll thread closes sockets,
// erases channels or has senders pop sent pixels, so it may call send()
// without holding mu_ on bytes it has looked up under mu_.
class ListenerCore {
 public:
  ListenerCore(UniqueFd listen_socket, UniqueFd local_socket, UniqueFd epoll, UniqueFd wake,
               PixelChannelLimits limits, std::shared_ptr<SharedRegions> regions)
      : listen_socket_(std::move(listen_socket)),
        local_listen_socket_(std::move(local_socket)),
        epoll_(std::move(epoll)),
        wake_(std::move(wake)),
        limits_(limits),
        regions_(std::move(regions)),
        pairing_({limits.attach_timeout, limits.max_unpaired}) {}

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
  void SetServicePort(int port) { service_port_.store(port); }
  // Returns once a whole turn of the loop begun after the call has run
  // (its events handled, its sweep and callbacks done), or the loop ended.
  void AwaitTurn() ABSL_LOCKS_EXCLUDED(mu_);
  // From SharedRegions, on whichever thread freed the region: queues a
  // kForget record for the loaders that know it. Takes no lock of the core
  // but freed_mu_ (a region may be freed under mu_).
  void RegionFreed(uint64_t region) ABSL_LOCKS_EXCLUDED(freed_mu_);

 private:
  struct ChannelState {
    UniqueFd socket;  // none until the loader's connection arrives
    // Pixels sent before the connection arrived.
    std::deque<QueuedPixels> waiting;
    // Once the connection arrived: TCP or same host, as it came.
    std::unique_ptr<PixelSender> sender;
    bool writable = false;
    bool close_requested = false;
  };
  // A connection not paired with a stream: still sending its hello, or
  // waiting for its ticket to be claimed (pairing_ keeps its deadline).
  struct Unpaired {
    UniqueFd socket;
    bool local = false;
    uint8_t hello[kPixelChannelHelloBytes] = {};
    size_t received = 0;
  };
  // A same-host channel the server ended while its loader may still be
  // copying: the pixels stay until the loader closes its end.
  struct Lingering {
    UniqueFd socket;
    std::unique_ptr<PixelSender> sender;  // holding the pixels not yet acked
    absl::Time deadline;
  };

  void WakeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof(one));
  }
  void AcceptAll(int listen_socket, bool local) ABSL_LOCKS_EXCLUDED(mu_);
  void EndLingeringLocked(int fd, bool timed_out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // kForget records for the regions freed since the last turn.
  void QueueForgetsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) ABSL_LOCKS_EXCLUDED(freed_mu_);
  void HandleEvent(int fd, uint32_t events) ABSL_LOCKS_EXCLUDED(mu_);
  void ReadHelloLocked(int fd, Unpaired& unpaired) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes PixelPortNotice to a connection that is not a pixel channel's.
  void TellServicePort(int fd);
  void AttachLocked(uint64_t channel, Unpaired connection) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the unpaired connection on `fd` out of unpaired_.
  Unpaired TakeUnpairedLocked(int fd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CloseUnpairedLocked(int fd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the channel's queued pixels, closes its socket and forgets it;
  // logs `why` unless empty. Pixels a same-host loader may be copying linger
  // unless `loader_gone`.
  void BreakLocked(uint64_t channel, const std::string& why, bool loader_gone = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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
  UniqueFd local_listen_socket_;  // none without shared regions
  UniqueFd epoll_;
  // Written from any thread, read by the epoll thread.
  const UniqueFd wake_;
  const PixelChannelLimits limits_;
  const std::shared_ptr<SharedRegions> regions_;
  std::atomic<int> service_port_{0};

  absl::Mutex freed_mu_;
  std::vector<uint64_t> freed_regions_ ABSL_GUARDED_BY(freed_mu_);

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  int64_t turns_ ABSL_GUARDED_BY(mu_) = 0;  // of the loop, completed
  // Tickets, hellos, claims and deadlines: who pairs with whom.
  PixelChannelPairing pairing_ ABSL_GUARDED_BY(mu_);
  // The sockets and queues of what pairing_ knows, by its numbers.
  std::map<uint64_t, ChannelState> channels_ ABSL_GUARDED_BY(mu_);
  std::map<int, Unpaired> unpaired_ ABSL_GUARDED_BY(mu_);    // by socket descriptor
  std::map<int, uint64_t> attached_ ABSL_GUARDED_BY(mu_);    // socket -> channel
  std::map<int, Lingering> lingering_ ABSL_GUARDED_BY(mu_);  // by socket descriptor
  // Callbacks owed, run by the loop outside mu_.
  SentCallbacks callbacks_ ABSL_GUARDED_BY(mu_);
};

void ListenerCore::Run() {
  epoll_event events[64];
  bool busy = false;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) {
        break;
      }
    }
    const int count = epoll_wait(epoll_.get(), events, 64, busy ? 0 : 100);
    for (int i = 0; i < count; ++i) {
      HandleEvent(events[i].data.fd, events[i].events);
    }
    {
      absl::MutexLock lock(&mu_);
      QueueForgetsLocked();
      SweepLocked();
    }
    busy = FlushAll();
    RunCallbacks();
    absl::MutexLock lock(&mu_);
    ++turns_;
  }
  {
    absl::MutexLock lock(&mu_);
    // The server is going: its memory is about to go with it, and the pixels
    // a loader has not copied yet are lost to that loader either way.
    while (!channels_.empty()) {
      BreakLocked(channels_.begin()->first, "", /*loader_gone=*/true);
    }
    while (!lingering_.empty()) {
      EndLingeringLocked(lingering_.begin()->first, false);
    }
    while (!unpaired_.empty()) {
      CloseUnpairedLocked(unpaired_.begin()->first);
    }
    stopped_ = true;
  }
  RunCallbacks();
  {
    absl::MutexLock lock(&mu_);
    ++turns_;
  }
  listen_socket_.reset();
  local_listen_socket_.reset();
  epoll_.reset();
}

void ListenerCore::HandleEvent(int fd, uint32_t events) {
  if (fd == listen_socket_.get()) {
    return AcceptAll(fd, /*local=*/false);
  }
  if (local_listen_socket_.valid() && fd == local_listen_socket_.get()) {
    return AcceptAll(fd, /*local=*/true);
  }
  if (fd == wake_.get()) {
    uint64_t count = 0;
    (void)!::read(wake_.get(), &count, sizeof(count));
    return;
  }
  absl::MutexLock lock(&mu_);
  if (auto it = unpaired_.find(fd); it != unpaired_.end()) {
    return ReadHelloLocked(fd, it->second);
  }
  if (auto it = lingering_.find(fd); it != lingering_.end()) {
    if (it->second.sender->ReadFromLoader(fd, callbacks_).closed) {
      EndLingeringLocked(fd, false);
    }
    return;
  }
  auto it = attached_.find(fd);
  if (it == attached_.end()) {
    return;
  }
  const uint64_t channel = it->second;
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
    const LoaderEnd end = channels_[channel].sender->ReadFromLoader(fd, callbacks_);
    if (end.closed) {
      return BreakLocked(channel, end.why, /*loader_gone=*/true);
    }
  }
  if (events & EPOLLOUT) {
    channels_[channel].writable = true;
  }
}

void ListenerCore::EndLingeringLocked(int fd, bool timed_out) {
  auto it = lingering_.find(fd);
  if (it == lingering_.end()) {
    return;
  }
  if (timed_out) {
    LogWarning(
        "a same-host loader kept its ended pixel channel open for %s; the memory of the "
        "batches it had not acked is reused",
        absl::FormatDuration(limits_.linger_timeout));
  }
  it->second.sender->Break(callbacks_, /*loader_gone=*/true);
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  lingering_.erase(it);  // closes the socket, releases the pixels
}

void ListenerCore::RegionFreed(uint64_t region) {
  {
    absl::MutexLock lock(&freed_mu_);
    freed_regions_.push_back(region);
  }
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
}

void ListenerCore::QueueForgetsLocked() {
  std::vector<uint64_t> freed;
  {
    absl::MutexLock lock(&freed_mu_);
    freed.swap(freed_regions_);
  }
  for (uint64_t region : freed) {
    for (auto& [id, state] : channels_) {
      if (state.sender != nullptr) {
        state.sender->RegionFreed(region);
      }
    }
  }
}

void ListenerCore::AcceptAll(int listen_socket, bool local) {
  while (true) {
    UniqueFd socket(::accept4(listen_socket, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!socket.valid()) {
      if (errno == EINTR || errno == ECONNABORTED) {
        continue;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        LogWarning("pixel channel port: accept: %s", ErrnoText(errno));
      }
      return;
    }
    absl::MutexLock lock(&mu_);
    if (!pairing_.Accepted(socket.get(), absl::Now())) {
      LogWarning("pixel channel port: %d connections not paired with a stream; refusing more",
                 pairing_.waiting_connections());
      continue;  // closed with `socket`
    }
    epoll_event event{};
    event.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    event.data.fd = socket.get();
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, socket.get(), &event) != 0) {
      pairing_.ConnectionClosed(socket.get());
      continue;
    }
    Unpaired& unpaired = unpaired_[socket.get()];
    unpaired.local = local;
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
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    }
    return CloseUnpairedLocked(fd);  // gone before pairing
  }
  // Bytes after the hello, or the connection's end: either way it is done.
  uint8_t byte;
  const bool ended = ::recv(fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK) >= 0;
  if (was_presented) {
    if (ended) {
      CloseUnpairedLocked(fd);
    }
    return;
  }
  if (std::memcmp(unpaired.hello, kPixelChannelMagic, sizeof(kPixelChannelMagic)) != 0) {
    LogWarning(
        "pixel channel port: a connection without the protocol's greeting; told the "
        "service port and closed");
    TellServicePort(fd);
    return CloseUnpairedLocked(fd);
  }
  PixelTicket ticket;
  std::memcpy(ticket.data(), unpaired.hello + sizeof(kPixelChannelMagic), ticket.size());
  const PixelChannelPairing::Verdict verdict = pairing_.Presented(fd, ticket, absl::Now());
  switch (verdict.action) {
    case PixelChannelPairing::Verdict::Action::kAttach:
      AttachLocked(verdict.channel, TakeUnpairedLocked(fd));
      // A loader already gone breaks its channel now, not at the deadline.
      if (ended) {
        BreakLocked(verdict.channel, "", /*loader_gone=*/true);
      }
      return;
    case PixelChannelPairing::Verdict::Action::kWait:
      if (ended) {
        CloseUnpairedLocked(fd);
      }
      return;
    case PixelChannelPairing::Verdict::Action::kClose:
      return CloseUnpairedLocked(fd);
  }
}

void ListenerCore::TellServicePort(int fd) {
  // What the client sent past the hello is read first: closing a socket with
  // unread input resets the connection, and the reset can overtake the line.
  // A bounded read (a client's first flight is a few KiB): one that keeps
  // sending cannot hold the listener's thread here.
  char discard[4096];
  for (int read = 0; read < 16; ++read) {
    if (::recv(fd, discard, sizeof(discard), MSG_DONTWAIT) <= 0) {
      break;
    }
  }
  const std::string notice = PixelPortNotice(service_port_.load());
  (void)!::send(fd, notice.data(), notice.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  ::shutdown(fd, SHUT_WR);
}

void ListenerCore::AttachLocked(uint64_t channel, Unpaired connection) {
  ChannelState& state = channels_[channel];
  attached_[connection.socket.get()] = channel;
  state.sender = connection.local
                     ? MakeSameHostPixelSender(std::exchange(state.waiting, {}), regions_)
                     : MakeTcpPixelSender(std::exchange(state.waiting, {}));
  state.socket = std::move(connection.socket);
  state.writable = true;  // a fresh socket; EPOLLOUT says when it is again
}

ListenerCore::Unpaired ListenerCore::TakeUnpairedLocked(int fd) {
  auto it = unpaired_.find(fd);
  Unpaired connection = std::move(it->second);
  unpaired_.erase(it);
  return connection;
}

void ListenerCore::CloseUnpairedLocked(int fd) {
  auto it = unpaired_.find(fd);
  if (it == unpaired_.end()) {
    return;
  }
  pairing_.ConnectionClosed(fd);
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  unpaired_.erase(it);  // closes the socket
}

void ListenerCore::BreakLocked(uint64_t channel, const std::string& why, bool loader_gone) {
  auto it = channels_.find(channel);
  if (it == channels_.end()) {
    return;
  }
  ChannelState& state = it->second;
  if (!why.empty()) {
    LogWarning("%s", why);
  }
  for (QueuedPixels& queued : state.waiting) {
    callbacks_.emplace_back(std::move(queued.sent), false);
  }
  if (state.socket.valid()) {
    const int fd = state.socket.get();
    attached_.erase(fd);
    if (state.sender->Break(callbacks_, loader_gone)) {
      // The loader may be copying out of this memory right now: it sees the
      // end of the channel when it next reads, closes its end, and only
      // then is the memory released (to be reused for other batches).
      ::shutdown(fd, SHUT_WR);
      lingering_[fd] = {std::move(state.socket), std::move(state.sender),
                        absl::Now() + limits_.linger_timeout};
    } else {
      epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
    }
  }
  pairing_.ChannelEnded(channel);
  channels_.erase(it);  // closes the socket unless it lingers
}

void ListenerCore::SweepLocked() {
  const absl::Time now = absl::Now();
  std::vector<uint64_t> to_break;
  for (const auto& [id, state] : channels_) {
    if (state.close_requested) {
      to_break.push_back(id);
    }
  }
  for (uint64_t id : to_break) {
    BreakLocked(id, "");
  }
  const PixelChannelPairing::Expired late = pairing_.Tick(now);
  for (const uint64_t id : late.channels) {
    BreakLocked(id, absl::StrCat("a loader's pixel channel connection did not arrive within ",
                                 absl::FormatDuration(limits_.attach_timeout)));
  }
  for (const int fd : late.connections) {
    CloseUnpairedLocked(fd);
  }
  std::vector<int> expired;
  for (const auto& [fd, lingering] : lingering_) {
    if (now > lingering.deadline) {
      expired.push_back(fd);
    }
  }
  for (int fd : expired) {
    EndLingeringLocked(fd, /*timed_out=*/true);
  }
}

bool ListenerCore::FlushAll() {
  std::vector<uint64_t> ready;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, state] : channels_) {
      if (state.sender != nullptr && state.writable && state.sender->HasWork()) {
        ready.push_back(id);
      }
    }
  }
  for (uint64_t id : ready) {
    Flush(id);
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [id, state] : channels_) {
    if (state.sender != nullptr && state.writable && state.sender->HasWork()) {
      return true;
    }
  }
  return false;
}

void ListenerCore::Flush(uint64_t channel) {
  size_t written = 0;
  while (written < kMaxBytesPerTurn) {
    int fd;
    PixelChunk chunk;
    {
      absl::MutexLock lock(&mu_);
      auto it = channels_.find(channel);
      if (it == channels_.end() || !it->second.writable || it->second.sender == nullptr) {
        return;
      }
      std::optional<PixelChunk> next = it->second.sender->Next();
      if (!next) {
        return;
      }
      fd = it->second.socket.get();
      chunk = *next;
    }
    // Outside mu_: only this thread pops the sender's queue or closes the
    // socket, and queued bytes stay where they are while others are queued.
    ssize_t n = 0;
    if (chunk.attach_fd >= 0) {
      n = SendWithDescriptor(fd, chunk.data, chunk.size, chunk.attach_fd);
    } else if (chunk.size > 0) {
      n = ::send(fd, chunk.data, chunk.size, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    const int error = errno;
    absl::MutexLock lock(&mu_);
    ChannelState& state = channels_[channel];
    if (n < 0) {
      if (error == EINTR) {
        continue;
      }
      if (error == EAGAIN || error == EWOULDBLOCK) {
        state.writable = false;
        return;
      }
      // The loader's end going away is its stream's business; other errors
      // are worth a line.
      const bool peer_gone = error == EPIPE || error == ECONNRESET;
      return BreakLocked(channel,
                         peer_gone ? "" : absl::StrCat("pixel channel send: ", ErrnoText(error)),
                         /*loader_gone=*/peer_gone);
    }
    written += static_cast<size_t>(n);
    state.sender->Wrote(static_cast<size_t>(n), callbacks_);
  }
}

void ListenerCore::RunCallbacks() {
  SentCallbacks callbacks;
  {
    absl::MutexLock lock(&mu_);
    callbacks.swap(callbacks_);
  }
  for (auto& [callback, sent] : callbacks) {
    if (callback) {
      callback(sent);
    }
  }
}

absl::StatusOr<uint64_t> ListenerCore::Claim(const PixelTicket& ticket) {
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    return absl::UnavailableError("the pixel channel port is closing");
  }
  ASSIGN_OR_RETURN(const PixelChannelPairing::Claimed claimed, pairing_.Claim(ticket, absl::Now()));
  channels_[claimed.channel];
  if (claimed.attach) {
    AttachLocked(claimed.channel, TakeUnpairedLocked(*claimed.attach));
    WakeLocked();
  }
  return claimed.channel;
}

void ListenerCore::AwaitTurn() {
  absl::MutexLock lock(&mu_);
  // The turn under way may have begun before the call: the one after it.
  const int64_t target = turns_ + 2;
  WakeLocked();
  const auto done = [this, target]()
                        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return turns_ >= target || stopped_; };
  mu_.Await(absl::Condition(&done));
}

void ListenerCore::Send(uint64_t channel, OutgoingPixels pixels, PixelChannel::SentCallback sent) {
  absl::MutexLock lock(&mu_);
  // After the loop has stopped nothing would run the callback: it is dropped
  // (the listener outlives the streams that send, see data_server.cc).
  if (stopped_) {
    return;
  }
  auto it = channels_.find(channel);
  if (it == channels_.end() || it->second.close_requested) {
    callbacks_.emplace_back(std::move(sent), false);
  } else if (it->second.sender != nullptr) {
    it->second.sender->Queue({std::move(pixels), std::move(sent)});
  } else {
    it->second.waiting.push_back({std::move(pixels), std::move(sent)});
  }
  WakeLocked();
}

void ListenerCore::Close(uint64_t channel) {
  absl::MutexLock lock(&mu_);
  auto it = channels_.find(channel);
  if (it == channels_.end()) {
    return;
  }
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
  EpollPixelChannelListener(std::shared_ptr<ListenerCore> core, int port, std::string local_socket,
                            std::shared_ptr<SharedRegions> regions)
      : core_(std::move(core)),
        port_(port),
        local_socket_(std::move(local_socket)),
        regions_(std::move(regions)),
        thread_([core = core_] { core->Run(); }) {
    if (regions_ != nullptr) {
      regions_->SetReleaseListener([weak = std::weak_ptr<ListenerCore>(core_)](uint64_t region) {
        if (std::shared_ptr<ListenerCore> core = weak.lock()) {
          core->RegionFreed(region);
        }
      });
    }
  }
  ~EpollPixelChannelListener() override {
    if (regions_ != nullptr) {
      regions_->SetReleaseListener({});
    }
    core_->Stop();
    thread_.join();
  }

  int port() const override { return port_; }
  void SetServicePort(int service_port) override { core_->SetServicePort(service_port); }
  std::string local_socket() const override { return local_socket_; }
  void AwaitTurn() override { core_->AwaitTurn(); }

  absl::StatusOr<std::shared_ptr<PixelChannel>> Claim(const PixelTicket& ticket) override {
    absl::StatusOr<uint64_t> id = core_->Claim(ticket);
    if (!id.ok()) {
      return id.status();
    }
    return std::make_shared<EpollPixelChannel>(core_, *id);
  }

 private:
  const std::shared_ptr<ListenerCore> core_;
  const int port_;
  const std::string local_socket_;
  const std::shared_ptr<SharedRegions> regions_;
  std::thread thread_;
};

// An abstract Unix socket (no file; gone with the process) with a random
// name, listening. Abstract names belong to a network namespace: only a
// loader on this host (in this namespace) reaches it.
absl::StatusOr<std::pair<UniqueFd, std::string>> ListenLocal() {
  const PixelTicket nonce = NewPixelTicket();
  const std::string name =
      absl::StrCat("heterodl-pixels-", absl::BytesToHexString(PixelTicketBytes(nonce)));
  ASSIGN_OR_RETURN(const AbstractAddress address, AbstractSocketAddress(name));
  UniqueFd socket(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!socket.valid() || ::bind(socket.get(), address.as_sockaddr(), address.length) != 0 ||
      ::listen(socket.get(), 128) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for same-host pixel channels: ", ErrnoText(errno)));
  }
  return std::make_pair(std::move(socket), name);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PixelChannelListener>> PixelChannelListener::Listen(
    const std::string& host, int port, PixelChannelLimits limits,
    std::shared_ptr<SharedRegions> shared_regions) {
  const std::string where = absl::StrCat(host, ":", port);
  absl::StatusOr<AddressInfo> addresses = ResolveTcp(host, port, /*passive=*/true);
  if (!addresses.ok()) {
    return addresses.status();
  }
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
  UniqueFd local_socket;
  std::string local_name;
  if (shared_regions != nullptr) {
    absl::StatusOr<std::pair<UniqueFd, std::string>> local = ListenLocal();
    if (!local.ok()) {
      return local.status();
    }
    std::tie(local_socket, local_name) = *std::move(local);
    epoll_event local_event{};
    local_event.events = EPOLLIN | EPOLLET;
    local_event.data.fd = local_socket.get();
    if (epoll_ctl(epoll.get(), EPOLL_CTL_ADD, local_socket.get(), &local_event) != 0) {
      return absl::UnavailableError(absl::StrCat("pixel channel port: epoll: ", ErrnoText(errno)));
    }
  }
  auto core =
      std::make_shared<ListenerCore>(std::move(socket), std::move(local_socket), std::move(epoll),
                                     std::move(wake), limits, shared_regions);
  return std::make_unique<EpollPixelChannelListener>(
      std::move(core), bound_port, std::move(local_name), std::move(shared_regions));
}

}  // namespace heterodl
