#include "src/wire/byte_stream.h"

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
  if (!hold_released_) {
    context_->TryCancel();
    RemoveHold();
  }
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
}

bool ByteStream::Write(const grpc::ByteBuffer& message) {
  if (hold_released_) return false;
  {
    absl::MutexLock lock(&mu_);
    operation_pending_ = true;
  }
  StartWrite(&message);
  return AwaitOperation();
}

bool ByteStream::Read(grpc::ByteBuffer* message) {
  if (hold_released_) return false;
  {
    absl::MutexLock lock(&mu_);
    operation_pending_ = true;
  }
  StartRead(message);
  return AwaitOperation();
}

void ByteStream::WritesDone() {
  if (hold_released_) return;
  {
    absl::MutexLock lock(&mu_);
    operation_pending_ = true;
  }
  StartWritesDone();
  AwaitOperation();
}

bool ByteStream::AwaitOperation() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](bool* pending) { return !*pending; }, &operation_pending_));
  return operation_ok_;
}

grpc::Status ByteStream::Finish() {
  if (!hold_released_) {
    hold_released_ = true;
    RemoveHold();
  }
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
  return status_;
}

void ByteStream::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  operation_ok_ = ok;
  operation_pending_ = false;
}

void ByteStream::OnReadDone(bool ok) {
  absl::MutexLock lock(&mu_);
  operation_ok_ = ok;
  operation_pending_ = false;
}

void ByteStream::OnWritesDoneDone(bool ok) {
  absl::MutexLock lock(&mu_);
  operation_ok_ = ok;
  operation_pending_ = false;
}

void ByteStream::OnDone(const grpc::Status& status) {
  absl::MutexLock lock(&mu_);
  status_ = status;
  done_ = true;
}

}  // namespace heterodl
