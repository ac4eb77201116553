#include "src/rpc/byte_stream.h"

#include <utility>

namespace heterodl {

ByteStream::ByteStream(grpc::GenericStub& stub, grpc::ClientContext* context,
                       const std::string& method)
    : context_(context) {
  stub.PrepareBidiStreamingCall(context, method, grpc::StubOptions(), this);
  // Without a hold gRPC could end the call (OnDone) between two of our
  // operations, and starting one after that is undefined.
  AddHold();
  StartCall();
}

ByteStream::~ByteStream() {
  bool release;
  {
    absl::MutexLock lock(&mu_);
    release = !std::exchange(hold_released_, true);
  }
  if (release) {
    context_->TryCancel();
    RemoveHold();
  }
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
}

bool ByteStream::Send(grpc::ByteBuffer message) {
  {
    absl::MutexLock lock(&mu_);
    if (writes_broken_ || half_close_wanted_ || hold_released_) {
      return false;
    }
    to_write_.push_back(std::move(message));
  }
  StartNextWrite(/*in_reaction=*/false);
  return true;
}

void ByteStream::WritesDone() {
  {
    absl::MutexLock lock(&mu_);
    half_close_wanted_ = true;
  }
  StartNextWrite(/*in_reaction=*/false);
}

void ByteStream::StartNextWrite(bool in_reaction) {
  grpc::ByteBuffer* message = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (write_running_ || writes_broken_ || (hold_released_ && !in_reaction)) {
      return;
    }
    if (!to_write_.empty()) {
      writing_ = to_write_.front();
      to_write_.pop_front();
      message = &writing_;
    } else if (!half_close_wanted_ || half_close_started_) {
      return;
    }
    write_running_ = true;
    half_close_started_ = message == nullptr;
  }
  if (message != nullptr) {
    StartWrite(message);
  } else {
    StartWritesDone();
  }
}

bool ByteStream::Read(grpc::ByteBuffer* message) {
  {
    absl::MutexLock lock(&mu_);
    if (hold_released_) {
      return false;
    }
    read_pending_ = true;
  }
  StartRead(message);
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](bool* pending) { return !*pending; }, &read_pending_));
  return read_ok_;
}

grpc::Status ByteStream::Finish() {
  bool release;
  {
    absl::MutexLock lock(&mu_);
    release = !std::exchange(hold_released_, true);
  }
  if (release) {
    RemoveHold();
  }
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
  return status_;
}

void ByteStream::OnWriteDone(bool ok) {
  {
    absl::MutexLock lock(&mu_);
    write_running_ = false;
    if (!ok) {
      writes_broken_ = true;
      to_write_.clear();
    }
  }
  StartNextWrite(/*in_reaction=*/true);
}

void ByteStream::OnWritesDoneDone(bool ok) {
  absl::MutexLock lock(&mu_);
  write_running_ = false;
  if (!ok) {
    writes_broken_ = true;
  }
}

void ByteStream::OnReadDone(bool ok) {
  absl::MutexLock lock(&mu_);
  read_ok_ = ok;
  read_pending_ = false;
}

void ByteStream::OnDone(const grpc::Status& status) {
  absl::MutexLock lock(&mu_);
  status_ = status;
  done_ = true;
}

}  // namespace heterodl
