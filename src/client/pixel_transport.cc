#include "src/client/pixel_transport.h"

#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "src/client/pixel_channel_reader.h"
#include "src/common/log.h"
#include "src/common/net/host_port.h"
#include "src/common/status_macros.h"
#include "src/wire/pixel_channel.h"

namespace heterodl {
namespace {

// Checks that pixels which came inline are what the plan makes.
absl::Status CheckInlinePixels(const DecodedBatch& decoded, uint64_t planned_bytes) {
  if (decoded.pixels.size() != planned_bytes) {
    return absl::DataLossError(absl::StrCat("batch ", decoded.header.id().index(), " carries ",
                                            decoded.pixels.size(),
                                            " bytes of pixels; its shape makes ", planned_bytes));
  }
  return absl::OkStatus();
}

class GrpcPixels final : public PixelTransport {
 public:
  PixelPath path() const override { return PixelPath::kGrpc; }
  std::string ticket() const override { return ""; }

  absl::Status Receive(DecodedBatch& decoded, uint64_t planned_bytes,
                       BufferPool& /*pool*/) override {
    if (decoded.header.images_on_channel() != 0) {
      return absl::DataLossError(absl::StrCat("batch ", decoded.header.id().index(),
                                              " announces pixels on a pixel channel this stream "
                                              "lacks"));
    }
    return CheckInlinePixels(decoded, planned_bytes);
  }

  // A blocked read of the gRPC stream ends when its context is cancelled.
  void Interrupt() override {}
};

// A TCP or same-host channel. The server may still send a batch's pixels
// inline (images_on_channel == 0); those are checked as gRPC's are.
class ChannelPixels final : public PixelTransport {
 public:
  ChannelPixels(std::unique_ptr<PixelChannelReader> reader, const PixelTicket& ticket)
      : reader_(std::move(reader)), ticket_(PixelTicketBytes(ticket)) {}

  PixelPath path() const override {
    return reader_->local() ? PixelPath::kSameHost : PixelPath::kTcpChannel;
  }
  std::string ticket() const override { return ticket_; }

  absl::Status Receive(DecodedBatch& decoded, uint64_t planned_bytes, BufferPool& pool) override {
    if (decoded.header.images_on_channel() == 0) {
      return CheckInlinePixels(decoded, planned_bytes);
    }
    if (!decoded.pixels.empty()) {
      return absl::DataLossError(absl::StrCat("batch ", decoded.header.id().index(),
                                              " carries pixels both inline and on its channel"));
    }
    ASSIGN_OR_RETURN(decoded.pixels, pool.Get(planned_bytes));
    return reader_->ReadExactly(decoded.pixels.data(), planned_bytes);
  }

  void Interrupt() override { reader_->Interrupt(); }

 private:
  const std::unique_ptr<PixelChannelReader> reader_;
  const std::string ticket_;
};

}  // namespace

absl::string_view PixelPathName(PixelPath path) {
  switch (path) {
    case PixelPath::kGrpc:
      return "gRPC";
    case PixelPath::kTcpChannel:
      return "TCP pixel channel";
    case PixelPath::kSameHost:
      return "same-host shared memory";
  }
  return "unknown";
}

PixelTransportSelector::PixelTransportSelector(PixelTransportPolicy policy,
                                               std::string server_address)
    : policy_(policy), server_address_(std::move(server_address)) {}

std::unique_ptr<PixelTransport> PixelTransportSelector::Choose(const PixelOffer& offer) {
  if (!policy_.pixel_channel || policy_.tls) {
    return std::make_unique<GrpcPixels>();
  }
  // The server pairs a channel with its stream by this ticket.
  const PixelTicket ticket = NewPixelTicket();
  if (policy_.same_host_pixels && !offer.pixel_socket.empty() &&
      absl::Now() >= same_host_retry_after_) {
    // Refused at once unless the server is on this host: then over TCP.
    absl::StatusOr<std::unique_ptr<PixelChannelReader>> local =
        PixelChannelReader::ConnectLocal(offer.pixel_socket, ticket, policy_.connect_timeout);
    if (local.ok()) {
      return std::make_unique<ChannelPixels>(*std::move(local), ticket);
    }
  }
  if (offer.pixel_port == 0 || absl::Now() < tcp_retry_after_) {
    return std::make_unique<GrpcPixels>();
  }
  const absl::StatusOr<HostPort> address = SplitHostPort(server_address_);
  if (!address.ok()) {
    return std::make_unique<GrpcPixels>();  // a gRPC target of another kind
  }
  absl::StatusOr<std::unique_ptr<PixelChannelReader>> reader = PixelChannelReader::Connect(
      address->host, static_cast<int>(offer.pixel_port), ticket, policy_.connect_timeout);
  if (!reader.ok()) {
    LogWarning("data server %s: %s; its pixels go through gRPC for the next %s", server_address_,
               reader.status().message(), absl::FormatDuration(policy_.retry_after));
    tcp_retry_after_ = absl::Now() + policy_.retry_after;
    return std::make_unique<GrpcPixels>();
  }
  return std::make_unique<ChannelPixels>(*std::move(reader), ticket);
}

void PixelTransportSelector::Broke(const PixelTransport& transport, const absl::Status& status) {
  if (transport.path() != PixelPath::kSameHost || !absl::IsDataLoss(status)) {
    return;
  }
  LogWarning("data server %s: %s; its pixels come over TCP for the next %s", server_address_,
             status.message(), absl::FormatDuration(policy_.retry_after));
  same_host_retry_after_ = absl::Now() + policy_.retry_after;
}

}  // namespace heterodl
