#include "src/client/server_connection.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/client/server_channel.h"
#include "src/common/fingerprint.h"
#include "src/common/status_macros.h"
#include "src/rpc/grpc_status.h"
#include "src/wire/leaving.h"

namespace heterodl {
namespace {

constexpr char kStreamBatchesMethod[] = "/heterodl.v1.DataService/StreamBatches";
// How long the DatasetInfo before each stream may take.
constexpr absl::Duration kAskTimeout = absl::Seconds(5);
constexpr absl::Duration kFirstBackoff = absl::Milliseconds(200);
constexpr absl::Duration kMaxBackoff = absl::Seconds(5);
// How often a server that serves another dataset is asked again (it may be
// replaced by one that serves ours).
constexpr absl::Duration kIncompatibleRetry = absl::Seconds(30);

}  // namespace

ServerConnection::ServerConnection(int number, std::string address,
                                   const std::shared_ptr<grpc::Channel>& channel,
                                   std::shared_ptr<const ConnectionSettings> settings)
    : number_(number),
      address_(std::move(address)),
      settings_(std::move(settings)),
      stub_(v1::DataService::NewStub(channel)),
      stream_stub_(std::make_unique<grpc::GenericStub>(channel)),
      pixel_selector_(settings_->pixels, address_) {}

ServerConnection::~ServerConnection() {
  Close();
  Join();
}

void ServerConnection::Start(ConnectionEvents& events) {
  thread_ = std::thread([this, &events] { Run(events); });
}

bool ServerConnection::Send(const v1::BatchRequest& request) {
  absl::MutexLock lock(&mu_);
  return stream_ != nullptr && stream_->Send(SerializeToByteBuffer(request));
}

void ServerConnection::CancelStream() {
  absl::MutexLock lock(&mu_);
  CancelLocked();
}

void ServerConnection::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  CancelLocked();
}

void ServerConnection::Join() {
  if (thread_.joinable()) {
    thread_.join();
  }
}

grpc::Status ServerConnection::GetDatasetInfo(grpc::ClientContext* context,
                                              const v1::DatasetInfoRequest& request,
                                              v1::DatasetInfo* info) const {
  return stub_->GetDatasetInfo(context, request, info);
}

bool ServerConnection::streaming() const {
  absl::MutexLock lock(&mu_);
  return stream_ != nullptr;
}

bool ServerConnection::same_host() const {
  absl::MutexLock lock(&mu_);
  return pixels_ != nullptr && pixels_->path() == PixelPath::kSameHost;
}

void ServerConnection::CancelLocked() {
  if (context_ != nullptr) {
    context_->TryCancel();
  }
  if (pixels_ != nullptr) {
    pixels_->Interrupt();
  }
}

bool ServerConnection::Expose(grpc::ClientContext* context, ByteStream* stream,
                              PixelTransport* pixels) {
  absl::MutexLock lock(&mu_);
  if (closed_ && context != nullptr) {
    return false;
  }
  context_ = context;
  stream_ = stream;
  pixels_ = pixels;
  return true;
}

void ServerConnection::Run(ConnectionEvents& events) {
  absl::Duration backoff = kFirstBackoff;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (closed_) {
        return;
      }
    }
    StreamEnd end = RunStream(events);
    if (end.delivered) {
      backoff = kFirstBackoff;
    }
    end.retry_every = end.incompatible ? kIncompatibleRetry : kMaxBackoff;
    if (!events.StreamEnded(number_, end)) {
      return;
    }
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&closed_),
                         end.incompatible ? kIncompatibleRetry : backoff);
    backoff = std::clamp(backoff * 2, kFirstBackoff, kMaxBackoff);
  }
}

StreamEnd ServerConnection::RunStream(ConnectionEvents& events) {
  StreamEnd end;
  // Its limits and pixel offer now: a restarted server may differ.
  v1::DatasetInfo info;
  {
    grpc::ClientContext context;
    AddAuthToken(context, settings_->auth_token);
    context.set_deadline(absl::ToChronoTime(absl::Now() + kAskTimeout));
    if (!Expose(&context, nullptr, nullptr)) {
      end.status = absl::CancelledError("the connection is closed");
      return end;
    }
    const grpc::Status asked = stub_->GetDatasetInfo(&context, {}, &info);
    Hide();
    if (!asked.ok()) {
      end.status = FromGrpcStatus(asked);
      return end;
    }
  }
  if (info.max_stream_batches() > 0) {
    events.LimitsKnown(number_, {info.max_stream_batches(), info.max_stream_bytes()});
  }
  // A server that joined mid-run, or one restarted on other files.
  if (info.fingerprint() != settings_->fingerprint) {
    end.incompatible = true;
    end.status = absl::FailedPreconditionError(absl::StrCat(
        "serves '", info.source(), "' (fingerprint ", FingerprintToHex(info.fingerprint()),
        "), not this job's dataset (fingerprint ", FingerprintToHex(settings_->fingerprint),
        "); not using it"));
    return end;
  }
  // The channel first: the server pairs it with the stream by its ticket.
  const std::unique_ptr<PixelTransport> pixels =
      pixel_selector_.Choose({info.pixel_port(), info.pixel_socket()});
  grpc::ClientContext context;
  AddAuthToken(context, settings_->auth_token);
  ByteStream stream(*stream_stub_, &context, kStreamBatchesMethod);
  v1::BatchRequest open;
  *open.mutable_open() = settings_->plan;
  open.set_client_id(settings_->client_id);
  open.set_pixel_ticket(pixels->ticket());
  stream.Send(SerializeToByteBuffer(open));
  if (!Expose(&context, &stream, pixels.get())) {
    end.status = absl::CancelledError("the connection is closed");
    return end;  // the stream's destructor cancels the call
  }
  events.StreamOpened(number_);
  const absl::Status result = ReadBatches(events, stream, *pixels, end.delivered);
  Hide();
  pixel_selector_.Broke(*pixels, result);
  if (absl::IsAborted(result)) {
    // The server ended the stream: its status says why (a refused plan is
    // fatal, a server going away is not), so read it before anything else.
    end.status = FromGrpcStatus(stream.Finish());
    const auto& trailers = context.GetServerTrailingMetadata();
    end.left = trailers.find(kLeavingMetadataKey) != trailers.end();
  } else {
    // Our own reason to stop (a bad batch, the connection closing): cancel,
    // or Finish() would wait for the server.
    context.TryCancel();
    stream.Finish();
    end.status = result;
  }
  if (end.status.ok()) {
    end.status = absl::UnavailableError("the server ended the stream");
  }
  return end;
}

absl::Status ServerConnection::ReadBatches(ConnectionEvents& events, ByteStream& stream,
                                           PixelTransport& pixels, bool& delivered) {
  grpc::ByteBuffer wire;
  while (true) {
    if (!stream.Read(&wire)) {
      return absl::AbortedError("stream closed by the server");
    }
    ASSIGN_OR_RETURN(DecodedBatch decoded,
                     DecodeBatch(wire, *settings_->pool, settings_->max_batch_bytes));
    wire.Clear();  // gRPC's receive buffers go back now
    // Checked before a byte of pixels is read, so a bad header cannot make
    // the loader allocate or wait for what the plan does not hold.
    ASSIGN_OR_RETURN(const uint64_t pixel_bytes, events.Admit(number_, decoded.header));
    RETURN_IF_ERROR(pixels.Receive(decoded, pixel_bytes, *settings_->pool));
    events.Received(number_, std::move(decoded));
    delivered = true;
  }
}

}  // namespace heterodl
