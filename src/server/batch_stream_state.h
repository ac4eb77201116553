// BatchStreamState: what one StreamBatches call on the server is to do next,
// decided from what happened to it, with no I/O. The reactor
// (src/server/batch_stream_reactor.h) tells it each event under its lock,
// then makes the gRPC calls Advance() decided after releasing the lock:
//
//   state.Open(max_in_flight, pixels_on_channel);
//   ASSIGN_OR_RETURN(auto admission, state.Request());  // a batch id asked
//   if (state.Built(std::move(encoded), now)) ...;       // a build finished
//   Actions actions = state.Advance();                   // write, finish, or wait
//
// The rules, in short: one write at a time (gRPC's), in the order batches
// were built; a batch counts as received once its write completes (or, with
// a pixel channel, once its pixels are written); the call ends once nothing
// is owed and the client has half-closed (OK) or the server is leaving
// (UNAVAILABLE with the leaving trailer); an error or a cancel ends it as
// soon as no write or read is starting, whatever is still owed.
//
// `Message` is what a write carries (grpc::ByteBuffer in the server, any
// movable value in tests). Not thread-safe.
#ifndef HETERODL_SRC_SERVER_BATCH_STREAM_STATE_H_
#define HETERODL_SRC_SERVER_BATCH_STREAM_STATE_H_

#include <deque>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace heterodl {

template <typename Message>
class BatchStreamState {
 public:
  // The calls to make, once the lock is released.
  struct Actions {
    bool read = false;                   // start the next read
    Message* write = nullptr;            // start this write (stays valid until WriteDone)
    std::optional<absl::Status> finish;  // end the call with this status
    // The call is to end because the server is leaving: add the leaving
    // trailer now (kLeavingMetadataKey; `finish` may come in a later Advance).
    bool add_leaving_trailer = false;
    // The call was decided to end with this status since the last
    // Advance(): the stream's builds not yet started are to be dropped (and
    // an error said).
    std::optional<absl::Status> newly_finishing;

    void Merge(const Actions& other) {
      read = read || other.read;
      if (other.write != nullptr) {
        write = other.write;
      }
      if (other.finish) {
        finish = other.finish;
      }
      add_leaving_trailer = add_leaving_trailer || other.add_leaving_trailer;
      if (other.newly_finishing) {
        newly_finishing = other.newly_finishing;
      }
    }
  };

  // What to do with a batch id the client asked for.
  enum class Admission {
    kBuild,  // build it: it is in flight until received
    kSkip,   // not built (the server is leaving): the client gets it back
  };

  explicit BatchStreamState(int max_in_flight) : max_in_flight_(max_in_flight) {}

  // The stream's open request was accepted: at most `max_in_flight` batches
  // requested and not yet received; `pixels_on_channel`: batches count as
  // received once their pixels are written (PixelsSent), not their header.
  void Open(int max_in_flight, bool pixels_on_channel) {
    max_in_flight_ = max_in_flight;
    pixels_on_channel_ = pixels_on_channel;
  }

  // A batch id was asked: RESOURCE_EXHAUSTED when the stream already has
  // max_in_flight batches asked and not received.
  absl::StatusOr<Admission> Request() {
    if (leaving_) {
      return Admission::kSkip;
    }
    if (in_flight_ >= max_in_flight_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("more than ", max_in_flight_,
                       " batches requested and not yet received on one stream "
                       "(the server's per-stream memory limit)"));
    }
    ++in_flight_;
    ++pending_builds_;
    return Admission::kBuild;
  }

  // A build finished with `message` (its header, with a pixel channel), at
  // `ready`. True: queued for writing (with a pixel channel, its pixels are
  // to be sent now, and PixelsSent follows); false: dropped, the call is
  // ending.
  bool Built(Message message, absl::Time ready) {
    --pending_builds_;
    if (finish_requested_) {
      return false;
    }
    ready_.emplace_back(std::move(message), ready);
    if (pixels_on_channel_) {
      ++pending_sends_;
    }
    return true;
  }

  // A build failed. True: it was dropped because the server is leaving, and
  // the client gets the id back (no longer in flight); otherwise the call
  // ends with `status`.
  bool BuildFailed(const absl::Status& status) {
    --pending_builds_;
    if (leaving_ && absl::IsCancelled(status)) {
      --in_flight_;
      return true;
    }
    RequestFinish(status);
    return false;
  }

  // A batch's pixels were written on the channel (`sent`), or dropped.
  void PixelsSent(bool sent) {
    --pending_sends_;
    --in_flight_;
    // The client's end went (it cancels the stream, too) or the network
    // broke (its stream fails over): not an error of this server's.
    if (!sent && !done_) {
      RequestFinish(absl::CancelledError("the pixel channel to the client closed"));
    }
  }

  // The write Advance() started completed (`ok`) or failed. When the batch
  // counts as received now (no pixel channel): when it was built.
  std::optional<absl::Time> WriteDone(bool ok) {
    writing_.reset();
    std::optional<absl::Time> received;
    if (!pixels_on_channel_) {
      --in_flight_;
      received = writing_ready_;
    }
    if (!ok) {
      RequestFinish(absl::CancelledError("client went away"));
    }
    return received;
  }

  // A request was read and handled. True: start the next read (then
  // ReadStarted() once it is started); false: the stream is ending.
  bool ContinueReading() {
    if (finish_requested_) {
      return false;
    }
    ++reads_starting_;
    return true;
  }
  void ReadStarted() { --reads_starting_; }
  // The client half-closed (or the call broke): no more requests.
  void ReadsDone() { reads_done_ = true; }

  // The server is leaving: ids asked from now on are skipped, and the call
  // ends once what is being built is sent. True the first time.
  bool Leave(const std::string& reason) {
    if (leaving_) {
      return false;
    }
    leaving_ = true;
    leaving_reason_ = reason;
    return true;
  }

  // Ends the call with `status` as soon as no write or read is starting; a
  // later request changes nothing.
  void RequestFinish(const absl::Status& status) {
    if (finish_requested_) {
      return;
    }
    finish_requested_ = true;
    finish_status_ = status;
    newly_finishing_ = status;
  }
  bool finishing() const { return finish_requested_; }

  // While held (HoldFinish calls not yet matched by ReleaseFinish), the
  // call does not end: the reactor is using the call's context from outside
  // a reaction (a cancel), and the end of the call would free it.
  void HoldFinish() { ++finish_holds_; }
  void ReleaseFinish() { --finish_holds_; }
  // The call's end was started (or gRPC is done with it): its context may
  // go away at any moment.
  bool ending() const { return finish_started_ || done_; }

  // gRPC is done with the call: nothing more is started.
  void Done() { done_ = true; }

  // The next write, or the end of the call, as the state allows.
  Actions Advance() {
    Actions actions = NextCalls();
    actions.newly_finishing = std::exchange(newly_finishing_, std::nullopt);
    return actions;
  }

  bool leaving() const { return leaving_; }
  bool done() const { return done_; }
  // Batches asked and not yet received.
  int in_flight() const { return in_flight_; }

 private:
  Actions NextCalls() {
    Actions actions;
    if (done_ || finish_started_) {
      return actions;
    }
    if (!finish_requested_ && !writing_ && !ready_.empty()) {
      writing_ = std::move(ready_.front().first);
      writing_ready_ = ready_.front().second;
      ready_.pop_front();
      actions.write = &*writing_;
      return actions;
    }
    const bool nothing_owed =
        pending_builds_ == 0 && ready_.empty() && !writing_ && pending_sends_ == 0;
    if (!finish_requested_ && nothing_owed && (reads_done_ || leaving_)) {
      RequestFinish(leaving_ ? absl::UnavailableError(
                                   absl::StrCat("the data server is leaving: ", leaving_reason_))
                             : absl::OkStatus());
      actions.add_leaving_trailer = leaving_;
    }
    if (finish_requested_ && !writing_ && reads_starting_ == 0 && finish_holds_ == 0) {
      finish_started_ = true;
      actions.finish = finish_status_;
    }
    return actions;
  }

  int max_in_flight_;
  bool pixels_on_channel_ = false;
  // Built batches waiting to be written, with when they were built.
  std::deque<std::pair<Message, absl::Time>> ready_;
  std::optional<Message> writing_;
  absl::Time writing_ready_;
  int in_flight_ = 0;
  int pending_builds_ = 0;
  // Batches whose pixels the channel has not yet written (or dropped).
  int pending_sends_ = 0;
  int reads_starting_ = 0;
  int finish_holds_ = 0;
  bool reads_done_ = false;
  bool finish_requested_ = false;
  bool finish_started_ = false;
  bool done_ = false;
  bool leaving_ = false;
  std::string leaving_reason_;
  absl::Status finish_status_;
  std::optional<absl::Status> newly_finishing_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_SERVER_BATCH_STREAM_STATE_H_
