// BatchStreamReactor: one StreamBatches call, the glue between gRPC, the
// BatchService that builds batches and the pixel channel that may carry
// their pixels. What to do next is BatchStreamState's (I/O-free, tested on
// its own); this file makes the calls it decides and keeps the reactor alive
// while callbacks may still come.
//
// It reads requests, schedules builds on the service's pool, writes
// finished batches one at a time (gRPC allows one outstanding write), and
// deletes itself once gRPC is done with it and no build or send still
// refers to it. The method is raw (byte buffers): batches go out encoded by
// src/wire/batch_codec.h, pixels referenced rather than serialized. When the
// client opened a pixel channel (src/wire/pixel_channel.h), a batch's header
// goes on the stream and its pixels on the channel, queued in the same order
// under mu_.
//
// Every decision is made under mu_; every gRPC call (StartRead, StartWrite,
// Finish) is made after releasing it, because gRPC may run a reaction inline
// from such a call (for instance on an already-cancelled RPC) and reactions
// take mu_.
#ifndef HETERODL_SRC_SERVER_BATCH_STREAM_REACTOR_H_
#define HETERODL_SRC_SERVER_BATCH_STREAM_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "heterodl/data_service.pb.h"
#include "src/server/activity_monitor.h"
#include "src/server/batch_service.h"
#include "src/server/batch_stream_state.h"
#include "src/server/pixel_channel_listener.h"
#include "src/server/refusal_log.h"
#include "src/server/stream_policy.h"

namespace heterodl {

// Batches a stream may have requested and not yet received, whatever their
// size. Clients keep far fewer; the limit only stops a client from queueing
// unbounded work (max_stream_bytes bounds the memory).
inline constexpr int kMaxInFlightPerStream = 64;

class BatchStreamReactor;

// The streams open now, so that a server about to stop can tell each one.
class OpenStreams {
 public:
  // False once the server is leaving: the stream is to leave at once.
  bool Add(BatchStreamReactor* stream) ABSL_LOCKS_EXCLUDED(mu_);
  // Empty while the server stays.
  std::string leave_reason() const ABSL_LOCKS_EXCLUDED(mu_);
  // From the stream's OnDone, before it may be deleted, with none of its
  // own locks held.
  void Remove(BatchStreamReactor* stream) ABSL_LOCKS_EXCLUDED(mu_);
  // Tells every open stream that the server is leaving (see
  // BatchStreamReactor::Leave); later streams are refused by the service.
  void LeaveAll(const std::string& reason) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the calls that began before `cutoff` and have not sent their open
  // request (see BatchStreamReactor::ExpireIfUnopened).
  void ExpireUnopened(absl::Time cutoff) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the `count` oldest calls that have not sent their open request.
  void ExpireOldestUnopened(int count) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the stream holding the most bytes of built batches unread since
  // before `cutoff` (see BatchStreamReactor::EndUnread); false when none
  // does.
  bool EndLargestUnread(absl::Time cutoff) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  std::set<BatchStreamReactor*> streams_ ABSL_GUARDED_BY(mu_);
  std::string leave_reason_ ABSL_GUARDED_BY(mu_);
};

class BatchStreamReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // REQUIRES: activity.TryAcceptUnopenedCall() succeeded for this call; it
  // takes a stream slot (TryOpenStream) when its open request comes.
  // `pixel_listener` null: this server offers no pixel channel. `refusals`
  // counts a call refused a slot.
  BatchStreamReactor(grpc::CallbackServerContext& context, BatchService& service,
                     ActivityMonitor& activity, OpenStreams& open_streams,
                     const StreamPolicy& policy, RefusalLog& refusals,
                     PixelChannelListener* pixel_listener);
  ~BatchStreamReactor() override;

  // Keeps the reactor alive for a Leave() to come. From OpenStreams, while
  // the stream is registered (so OnDone has not yet run past Remove).
  void Retain() ABSL_LOCKS_EXCLUDED(mu_);
  // The server is leaving (a SIGTERM, a spot interruption notice, its
  // shutdown): batch ids asked from now on are not built, builds not yet
  // started are dropped, the batches being built are finished and sent, and
  // then the stream ends with UNAVAILABLE and kLeavingMetadataKey, so the
  // client asks the other servers for everything else at once. Releases the
  // reference Retain() took.
  void Leave(const std::string& reason) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the call with DEADLINE_EXCEEDED unless it has sent its open
  // request (or is ending): a call that never opens must not wait forever.
  // `now`: only once open_timeout has passed since it began. Releases the
  // reference Retain() took.
  void ExpireIfUnopened(bool now) ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels the call: its batches built and unread are freed, those being
  // built stop. Counted and logged (rate-limited) as a stream ended unread.
  // Releases the reference Retain() took.
  void EndUnread() ABSL_LOCKS_EXCLUDED(mu_);
  // Bytes of built batches not yet sent, when nothing was sent since before
  // `cutoff` (and they were built before it); else 0. Lock-free.
  uint64_t UnreadBytesSince(absl::Time cutoff) const;
  // When the call began.
  absl::Time created() const { return created_; }
  // Whether it waits for its open request, its constructor done (read
  // without the reactor's lock, to choose calls to expire: one still in its
  // constructor must not be finished before its first read starts).
  bool awaiting_open() const { return constructed_.load() && awaiting_open_.load(); }

  // gRPC's reactions.
  void OnReadDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnCancel() override ABSL_LOCKS_EXCLUDED(mu_);
  void OnDone() override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using State = BatchStreamState<grpc::ByteBuffer>;
  using Actions = State::Actions;

  // Makes the decided calls. The last statement is the one gRPC call that
  // may end the RPC (and, through OnDone, delete this): nothing touches the
  // reactor after it.
  void Perform(Actions actions) ABSL_LOCKS_EXCLUDED(mu_);
  // How a build's or a send's callback ends, outside mu_: it makes the calls
  // it decided while still holding its reference, so that gRPC ending the
  // call meanwhile (OnDone, on another thread or inline) cannot delete the
  // reactor under it; then it lets go, deleting the reactor if it was last.
  void PerformAndRelease(Actions actions) ABSL_LOCKS_EXCLUDED(mu_);
  // gRPC is done with the call and nothing else refers to it: the reaction
  // that sees this deletes the reactor.
  bool UnreferencedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The state's next calls, with what they need done under mu_ first.
  Actions AdvanceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the call with `status` once the state allows; drops the builds
  // not yet started.
  void FinishLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the stream's builds that have not started, once it is open;
  // with `abandon` (no one will receive them), those being built stop too.
  void CloseBuildsLocked(bool abandon) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Handles the request just read (on OnReadDone's thread).
  absl::Status HandleRequest() ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status HandleOpen() ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status HandleBatch() ABSL_LOCKS_EXCLUDED(mu_);
  void OnBuilt(absl::StatusOr<BuiltBatch> batch) ABSL_LOCKS_EXCLUDED(mu_);
  // UNAVAILABLE when this server has no pixel channels (the client then asks
  // again without; a restarted server may have turned them off).
  absl::StatusOr<std::shared_ptr<PixelChannel>> ClaimPixelChannel(const std::string& bytes);
  // Queues a built batch for the stream, and its pixels for the channel if
  // there is one: both queues keep the order of this call.
  void QueueLocked(BuiltBatch batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // From the pixel channel's thread, once per queued batch.
  void OnPixelsSent(bool sent, absl::Time ready) ABSL_LOCKS_EXCLUDED(mu_);
  // A batch of `bytes` is queued to send; the oldest queued is sent (or
  // dropped): for UnreadBytesSince.
  void UnsentAddedLocked(uint64_t bytes, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnsentGoneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  grpc::CallbackServerContext& context_;
  BatchService& service_;
  ActivityMonitor& activity_;
  OpenStreams& open_streams_;
  const StreamPolicy policy_;
  RefusalLog& refusals_;
  PixelChannelListener* const pixel_listener_;
  const absl::Time created_;
  // The client's host (PeerHost), whose share of stream slots it takes.
  const std::string host_;
  // Bytes of built batches not yet sent, and when one was last sent (or the
  // first was built): read without mu_ by OpenStreams.
  std::atomic<uint64_t> unsent_bytes_{0};
  std::atomic<int64_t> last_progress_ns_{0};
  std::atomic<bool> awaiting_open_{true};
  std::atomic<bool> constructed_{false};

  // Only touched by OnReadDone's thread, between StartRead calls.
  grpc::ByteBuffer request_wire_;
  v1::BatchRequest request_;
  std::shared_ptr<const StreamPlan> stream_;

  absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_){kMaxInFlightPerStream};
  // Callbacks yet to come that use this reactor (builds, pixel sends): it
  // lives until gRPC is done with the call and this is 0.
  int references_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<PixelChannel> pixel_channel_ ABSL_GUARDED_BY(mu_);
  // The sizes of the built batches not yet sent, oldest first.
  std::deque<uint64_t> unsent_sizes_ ABSL_GUARDED_BY(mu_);
  // The opened stream, for ending its builds from any reaction.
  std::shared_ptr<const StreamPlan> work_ ABSL_GUARDED_BY(mu_);
  // How the activity monitor counts the call: waiting for its open request
  // (until it comes or the call ends), then holding a stream slot.
  bool unopened_ ABSL_GUARDED_BY(mu_) = true;
  bool ended_unread_ ABSL_GUARDED_BY(mu_) = false;
  bool holds_slot_ ABSL_GUARDED_BY(mu_) = false;
};

// A stream refused before it starts (authentication, limits): finishes at
// once.
class RejectedStream final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit RejectedStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace heterodl

#endif  // HETERODL_SRC_SERVER_BATCH_STREAM_REACTOR_H_
