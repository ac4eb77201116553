// PixelChannelReader: the loader's end of a pixel channel (the protocol:
// src/wire/pixel_channel.h), a connected socket it reads pixels from.
//
//   const PixelTicket ticket = NewPixelTicket();
//   ASSIGN_OR_RETURN(auto reader, PixelChannelReader::Connect(host, port, ticket, timeout));
//   (open the stream with the ticket)
//   RETURN_IF_ERROR(reader->ReadExactly(tensor_data, header.images_on_channel()));
#ifndef HETERODL_SRC_WIRE_PIXEL_CHANNEL_READER_H_
#define HETERODL_SRC_WIRE_PIXEL_CHANNEL_READER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/common/net/unique_fd.h"
#include "src/wire/pixel_channel.h"

namespace heterodl {

class PixelChannelReader {
 public:
  // Connects and presents `ticket`. UNAVAILABLE (or DEADLINE_EXCEEDED after
  // `timeout`) naming host and port.
  static absl::StatusOr<std::unique_ptr<PixelChannelReader>> Connect(const std::string& host,
                                                                     int port,
                                                                     const PixelTicket& ticket,
                                                                     absl::Duration timeout);
  PixelChannelReader(const PixelChannelReader&) = delete;
  PixelChannelReader& operator=(const PixelChannelReader&) = delete;

  // Reads exactly `size` bytes into `destination`. UNAVAILABLE when the
  // connection ends or breaks first, or Interrupt() was called.
  absl::Status ReadExactly(uint8_t* destination, size_t size);
  // Makes a blocked ReadExactly, and every later one, fail. Any thread.
  void Interrupt();

 private:
  explicit PixelChannelReader(UniqueFd socket) : socket_(std::move(socket)) {}

  const UniqueFd socket_;
  std::atomic<bool> interrupted_{false};
};

}  // namespace heterodl

#endif  // HETERODL_SRC_WIRE_PIXEL_CHANNEL_READER_H_
