#include "src/server/batch_stream_reactor.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/common/log.h"
#include "src/common/status_macros.h"
#include "src/rpc/grpc_status.h"
#include "src/rpc/peer_host.h"
#include "src/wire/batch_codec.h"
#include "src/wire/leaving.h"
#include "src/wire/pixel_channel.h"

namespace heterodl {

bool OpenStreams::Add(BatchStreamReactor* stream) {
  absl::MutexLock lock(&mu_);
  streams_.insert(stream);
  return leave_reason_.empty();
}

std::string OpenStreams::leave_reason() const {
  absl::MutexLock lock(&mu_);
  return leave_reason_;
}

void OpenStreams::Remove(BatchStreamReactor* stream) {
  absl::MutexLock lock(&mu_);
  streams_.erase(stream);
}

void OpenStreams::LeaveAll(const std::string& reason) {
  std::vector<BatchStreamReactor*> streams;
  {
    absl::MutexLock lock(&mu_);
    if (!leave_reason_.empty()) {
      return;
    }
    leave_reason_ = reason;
    for (BatchStreamReactor* stream : streams_) {
      stream->Retain();
      streams.push_back(stream);
    }
  }
  // Outside mu_: a stream may end (and OnDone run) inside Leave().
  for (BatchStreamReactor* stream : streams) {
    stream->Leave(reason);
  }
}

void OpenStreams::ExpireUnopened(absl::Time cutoff) {
  std::vector<BatchStreamReactor*> streams;
  {
    absl::MutexLock lock(&mu_);
    for (BatchStreamReactor* stream : streams_) {
      if (stream->awaiting_open() && stream->created() < cutoff) {
        stream->Retain();
        streams.push_back(stream);
      }
    }
  }
  // Outside mu_, as in LeaveAll.
  for (BatchStreamReactor* stream : streams) {
    stream->ExpireIfUnopened(/*now=*/false);
  }
}

void OpenStreams::ExpireOldestUnopened(int count) {
  std::vector<BatchStreamReactor*> streams;
  {
    absl::MutexLock lock(&mu_);
    for (BatchStreamReactor* stream : streams_) {
      if (stream->awaiting_open()) {
        streams.push_back(stream);
      }
    }
    const size_t kept = std::min<size_t>(streams.size(), static_cast<size_t>(count));
    std::partial_sort(
        streams.begin(), streams.begin() + static_cast<std::ptrdiff_t>(kept), streams.end(),
        [](BatchStreamReactor* a, BatchStreamReactor* b) { return a->created() < b->created(); });
    streams.resize(kept);
    for (BatchStreamReactor* stream : streams) {
      stream->Retain();
    }
  }
  for (BatchStreamReactor* stream : streams) {
    stream->ExpireIfUnopened(/*now=*/true);
  }
}

bool OpenStreams::EndLargestUnread(absl::Time cutoff) {
  BatchStreamReactor* largest = nullptr;
  {
    absl::MutexLock lock(&mu_);
    uint64_t most = 0;
    for (BatchStreamReactor* stream : streams_) {
      if (const uint64_t unread = stream->UnreadBytesSince(cutoff); unread > most) {
        most = unread;
        largest = stream;
      }
    }
    if (largest == nullptr) {
      return false;
    }
    largest->Retain();
  }
  largest->EndUnread();  // outside mu_, as in LeaveAll
  return true;
}

BatchStreamReactor::BatchStreamReactor(grpc::CallbackServerContext& context, BatchService& service,
                                       ActivityMonitor& activity, OpenStreams& open_streams,
                                       const StreamPolicy& policy, RefusalLog& refusals,
                                       PixelChannelListener* pixel_listener)
    : context_(context),
      service_(service),
      activity_(activity),
      open_streams_(open_streams),
      policy_(policy),
      refusals_(refusals),
      pixel_listener_(pixel_listener),
      created_(absl::Now()),
      host_(PeerHost(context.peer())) {
  if (!open_streams_.Add(this)) {
    absl::MutexLock lock(&mu_);
    state_.Leave(open_streams_.leave_reason());
  }
  StartRead(&request_wire_);
  constructed_ = true;
}

BatchStreamReactor::~BatchStreamReactor() {
  absl::MutexLock lock(&mu_);
  activity_.BatchesRequested(-state_.in_flight());  // requested, never sent
}

void BatchStreamReactor::Retain() {
  absl::MutexLock lock(&mu_);
  ++references_;
}

void BatchStreamReactor::Leave(const std::string& reason) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    if (state_.Leave(reason)) {
      CloseBuildsLocked(/*abandon=*/false);  // those being built are sent
    }
    // A stream not yet opened may still be in its constructor, before its
    // first read: it ends when its open request is handled.
    if (work_ != nullptr) {
      actions = AdvanceLocked();
    }
  }
  PerformAndRelease(actions);
}

void BatchStreamReactor::ExpireIfUnopened(bool now) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    if (unopened_ && !state_.finishing() &&
        (now || absl::Now() - created_ >= policy_.open_timeout)) {
      state_.RequestFinish(absl::DeadlineExceededError(
          now ? std::string("no open request yet, and the oldest of too many calls waiting for "
                            "theirs")
              : absl::StrCat("no open request within ",
                             absl::FormatDuration(policy_.open_timeout))));
      actions = AdvanceLocked();
    }
  }
  PerformAndRelease(actions);
}

void BatchStreamReactor::EndUnread() {
  uint64_t unread = 0;
  {
    absl::MutexLock lock(&mu_);
    // A stream asked to end may still wait for a write the client does not
    // read: it is cancelled too.
    unread = state_.ending() ? 0 : unsent_bytes_.exchange(0);
    if (unread > 0) {
      ended_unread_ = true;
      // Not ended before TryCancel returns: the context stays valid.
      state_.HoldFinish();
      state_.RequestFinish(absl::ResourceExhaustedError(
          absl::StrCat("this stream held ", unread >> 20, " MiB of batches unread for over ",
                       absl::FormatDuration(policy_.unread_timeout),
                       " while other streams waited for the server's memory")));
    }
  }
  if (unread > 0) {
    if (std::optional<std::string> line =
            refusals_.Refused(RefusalKind::kUnreadStream, context_.peer(), absl::Now())) {
      LogWarning("%s (%d MiB)", *line, unread >> 20);
    }
    // A write the client does not read never completes by itself.
    context_.TryCancel();
  }
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    if (unread > 0) {
      state_.ReleaseFinish();
    }
    actions = AdvanceLocked();
  }
  PerformAndRelease(actions);
}

uint64_t BatchStreamReactor::UnreadBytesSince(absl::Time cutoff) const {
  const uint64_t unsent = unsent_bytes_.load();
  return unsent > 0 && last_progress_ns_.load() < absl::ToUnixNanos(cutoff) ? unsent : 0;
}

void BatchStreamReactor::UnsentAddedLocked(uint64_t bytes, absl::Time now) {
  if (unsent_sizes_.empty()) {
    last_progress_ns_ = absl::ToUnixNanos(now);  // unread from now on
  }
  unsent_sizes_.push_back(bytes);
  unsent_bytes_ += bytes;
}

void BatchStreamReactor::UnsentGoneLocked() {
  if (unsent_sizes_.empty()) {
    return;
  }
  unsent_bytes_ -= std::min(unsent_bytes_.load(), unsent_sizes_.front());
  unsent_sizes_.pop_front();
  last_progress_ns_ = absl::ToUnixNanos(absl::Now());
}

void BatchStreamReactor::OnReadDone(bool ok) {
  Actions actions;
  if (!ok) {
    absl::MutexLock lock(&mu_);
    state_.ReadsDone();
    actions = AdvanceLocked();
  } else {
    const absl::Status status = HandleRequest();
    absl::MutexLock lock(&mu_);
    if (!status.ok()) {
      state_.RequestFinish(status);
    } else if (state_.ContinueReading()) {
      actions.read = true;
    }
    actions.Merge(AdvanceLocked());
  }
  Perform(actions);
}

void BatchStreamReactor::OnWriteDone(bool ok) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    // Else the batch counts as sent once its pixels are.
    if (const std::optional<absl::Time> built = state_.WriteDone(ok)) {
      activity_.BatchSent(absl::Now() - *built);
      UnsentGoneLocked();
    }
    actions = AdvanceLocked();
  }
  Perform(actions);
}

void BatchStreamReactor::OnCancel() {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    state_.RequestFinish(absl::CancelledError("stream cancelled"));
    actions = AdvanceLocked();
  }
  Perform(actions);
}

void BatchStreamReactor::OnDone() {
  open_streams_.Remove(this);
  bool destroy;
  std::shared_ptr<PixelChannel> channel;
  {
    absl::MutexLock lock(&mu_);
    state_.Done();
    if (holds_slot_) {
      activity_.StreamClosed(host_);
    } else if (unopened_) {
      activity_.UnopenedCallEnded();
    }
    // A call can end without OnCancel or a Finish of ours (the server
    // shutting down): builds still queued are of no use to anyone.
    CloseBuildsLocked(/*abandon=*/true);
    destroy = UnreferencedLocked();
    channel = pixel_channel_;
    if (channel != nullptr) {
      activity_.PixelChannelStreams(-1);
    }
  }
  // Pixels still queued are dropped; their callbacks come from the
  // channel's thread, and the last one deletes this (unless `destroy`, this
  // may be gone already: only locals from here).
  if (channel != nullptr) {
    channel->Close();
  }
  if (destroy) {
    delete this;
  }
}

void BatchStreamReactor::Perform(Actions actions) {
  if (actions.read) {
    StartRead(&request_wire_);
    absl::MutexLock lock(&mu_);
    state_.ReadStarted();
    // With a write pending, this can neither write nor finish.
    actions.Merge(AdvanceLocked());
  }
  if (actions.write != nullptr) {
    StartWrite(actions.write);
  } else if (actions.finish) {
    Finish(ToGrpcStatus(*actions.finish));
  }
}

void BatchStreamReactor::PerformAndRelease(Actions actions) {
  Perform(std::move(actions));
  bool destroy;
  {
    absl::MutexLock lock(&mu_);
    --references_;
    destroy = UnreferencedLocked();
  }
  if (destroy) {
    delete this;
  }
}

bool BatchStreamReactor::UnreferencedLocked() const { return state_.done() && references_ == 0; }

BatchStreamReactor::Actions BatchStreamReactor::AdvanceLocked() {
  Actions actions = state_.Advance();
  if (actions.finish) {
    unsent_bytes_ = 0;  // what was built goes with the call, which is ending
  }
  if (actions.add_leaving_trailer) {
    context_.AddTrailingMetadata(kLeavingMetadataKey, "1");
  }
  if (const std::optional<absl::Status>& ending = actions.newly_finishing) {
    // Builds not started are dropped, those running stop; their callbacks
    // come from the pool.
    CloseBuildsLocked(/*abandon=*/true);
    // A call refused a slot or that never opened is counted (RefusalLog) or
    // a stranger's; saying each would let a flood of them fill the log.
    const bool refused_unopened =
        !holds_slot_ && (absl::IsResourceExhausted(*ending) || absl::IsDeadlineExceeded(*ending));
    // So is one ended for holding its batches unread (EndUnread).
    if (!ending->ok() && !absl::IsCancelled(*ending) && !state_.leaving() && !refused_unopened &&
        !ended_unread_) {
      LogWarning("batch stream ended with error: %s", ending->ToString());
    }
  }
  return actions;
}

void BatchStreamReactor::CloseBuildsLocked(bool abandon) {
  if (work_ != nullptr) {
    service_.CloseStream(*work_, abandon);
  }
}

absl::Status BatchStreamReactor::HandleRequest() {
  activity_.Touch();
  RETURN_IF_ERROR(ParseFromByteBuffer(request_wire_, &request_, "BatchRequest"));
  if (request_.has_open()) {
    return HandleOpen();
  }
  if (!request_.has_batch()) {
    return absl::InvalidArgumentError("empty request");
  }
  return HandleBatch();
}

absl::Status BatchStreamReactor::HandleOpen() {
  if (stream_ != nullptr) {
    return absl::InvalidArgumentError("stream opened twice");
  }
  {
    // The slot first: a refused call then registers nothing with the
    // service (its client's queue); a slot taken is given back at OnDone.
    absl::MutexLock lock(&mu_);
    if (!unopened_) {
      return absl::InvalidArgumentError("stream opened twice");
    }
    unopened_ = false;
    awaiting_open_ = false;
    activity_.UnopenedCallEnded();
    const StreamAdmission admission =
        activity_.TryOpenStream(host_, {policy_.max_streams, policy_.max_streams_per_host});
    if (admission != StreamAdmission::kOpened) {
      const bool host_full = admission == StreamAdmission::kHostFull;
      if (std::optional<std::string> line = refusals_.Refused(
              host_full ? RefusalKind::kHostStreamLimit : RefusalKind::kStreamLimit,
              context_.peer(), absl::Now())) {
        LogWarning("%s", *line);
      }
      return absl::ResourceExhaustedError(
          host_full
              ? absl::StrCat("your host (", host_, ") has its share of ",
                             policy_.max_streams_per_host, " streams open on this server")
              : absl::StrCat("the server has its limit of ", policy_.max_streams, " streams open"));
    }
    holds_slot_ = true;
  }
  ASSIGN_OR_RETURN(stream_, service_.OpenStream(request_.open(), request_.client_id()));
  {
    absl::MutexLock lock(&mu_);
    // From here on, ending the stream ends its builds.
    work_ = stream_;
    if (state_.finishing()) {
      CloseBuildsLocked(/*abandon=*/true);
    }
  }
  std::shared_ptr<PixelChannel> channel;
  if (!request_.pixel_ticket().empty()) {
    ASSIGN_OR_RETURN(channel, ClaimPixelChannel(request_.pixel_ticket()));
    activity_.PixelChannelStreams(1);
  }
  // Sized by the stream's own source: a Python dataset of large samples
  // gets fewer batches in flight than one of thumbnails.
  const int window = StreamWindow(*stream_->source, stream_->params.batch_size,
                                  policy_.max_stream_bytes, kMaxInFlightPerStream);
  absl::MutexLock lock(&mu_);
  state_.Open(window, channel != nullptr);
  pixel_channel_ = std::move(channel);
  return absl::OkStatus();
}

absl::Status BatchStreamReactor::HandleBatch() {
  if (stream_ == nullptr) {
    return absl::InvalidArgumentError("the first request of a stream must be 'open'");
  }
  RETURN_IF_ERROR(service_.ValidateBatchId(*stream_, request_.batch()));
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(const State::Admission admission, state_.Request());
    if (admission == State::Admission::kSkip) {
      return absl::OkStatus();  // the client gets it back when the stream ends
    }
    ++references_;  // released by the build's callback
  }
  activity_.BatchesRequested(1);
  service_.BuildAsync(stream_, request_.batch(),
                      [this](absl::StatusOr<BuiltBatch> batch) { OnBuilt(std::move(batch)); });
  return absl::OkStatus();
}

void BatchStreamReactor::OnBuilt(absl::StatusOr<BuiltBatch> batch) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    if (!batch.ok()) {
      if (state_.BuildFailed(batch.status())) {
        activity_.BatchesRequested(-1);  // dropped as the server leaves: handed back
      }
    } else {
      QueueLocked(*std::move(batch));
    }
    actions = AdvanceLocked();
  }
  PerformAndRelease(actions);
}

absl::StatusOr<std::shared_ptr<PixelChannel>> BatchStreamReactor::ClaimPixelChannel(
    const std::string& bytes) {
  if (pixel_listener_ == nullptr) {
    return absl::UnavailableError("this data server offers no pixel channel");
  }
  const std::optional<PixelTicket> ticket = PixelTicketFromBytes(bytes);
  if (!ticket) {
    return absl::InvalidArgumentError("pixel_ticket must be 16 bytes");
  }
  return pixel_listener_->Claim(*ticket);
}

void BatchStreamReactor::QueueLocked(BuiltBatch batch) {
  const absl::Time ready = absl::Now();
  const uint64_t bytes = batch.pixels.size;
  // A batch of no bytes (a collated batch that could not be made) has
  // nothing for the channel: images_on_channel 0 says it is all inline.
  if (pixel_channel_ == nullptr || bytes == 0) {
    if (state_.Built(EncodeBatch(batch.header, std::move(batch.pixels)), ready)) {
      UnsentAddedLocked(bytes, ready);
    }
    return;
  }
  batch.header.set_images_on_channel(batch.pixels.size);
  if (!state_.Built(SerializeToByteBuffer(batch.header), ready)) {
    return;
  }
  UnsentAddedLocked(bytes, ready);
  ++references_;  // released by the send's callback
  pixel_channel_->Send(std::move(batch.pixels),
                       [this, ready](bool sent) { OnPixelsSent(sent, ready); });
}

void BatchStreamReactor::OnPixelsSent(bool sent, absl::Time ready) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    state_.PixelsSent(sent);
    UnsentGoneLocked();
    if (sent) {
      activity_.BatchSent(absl::Now() - ready);
    } else {
      activity_.BatchesRequested(-1);
    }
    actions = AdvanceLocked();
  }
  PerformAndRelease(actions);
}

}  // namespace heterodl
