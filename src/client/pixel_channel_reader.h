// PixelChannelReader: the loader's end of a pixel channel (the protocol:
// src/wire/pixel_channel.h), a connected socket it reads pixels from.
//
//   const PixelTicket ticket = NewPixelTicket();
//   ASSIGN_OR_RETURN(auto reader, PixelChannelReader::Connect(host, port, ticket, timeout));
//   (open the stream with the ticket)
//   RETURN_IF_ERROR(reader->ReadExactly(tensor_data, header.images_on_channel()));
#ifndef HETERODL_SRC_CLIENT_PIXEL_CHANNEL_READER_H_
#define HETERODL_SRC_CLIENT_PIXEL_CHANNEL_READER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/common/memory/shared_regions.h"
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
  // The same on a server's same-host socket (DatasetInfo.pixel_socket, an
  // abstract Unix socket name). UNAVAILABLE at once when there is no such
  // socket here: the server is on another host (or network namespace).
  static absl::StatusOr<std::unique_ptr<PixelChannelReader>> ConnectLocal(
      const std::string& socket_name, const PixelTicket& ticket, absl::Duration timeout);
  PixelChannelReader(const PixelChannelReader&) = delete;
  PixelChannelReader& operator=(const PixelChannelReader&) = delete;
  ~PixelChannelReader();

  // Reads exactly `size` bytes into `destination` (on a same-host channel:
  // copies them out of the server's shared memory). UNAVAILABLE when the
  // connection ends or breaks first, or Interrupt() was called; DATA_LOSS
  // when a same-host server breaks the protocol.
  absl::Status ReadExactly(uint8_t* destination, size_t size);
  // Makes a blocked ReadExactly, and every later one, fail. Any thread.
  void Interrupt();

  // True on a same-host channel.
  bool local() const { return local_; }

 private:
  PixelChannelReader(UniqueFd socket, bool local) : socket_(std::move(socket)), local_(local) {}

  // Exactly `size` bytes off the socket (a TCP channel's pixels, or a
  // same-host channel's inline ones).
  absl::Status ReadBytes(uint8_t* destination, size_t size);
  absl::Status ReadLocal(uint8_t* destination, size_t size);
  // The next record, and the descriptor that came with it (if any).
  absl::Status ReadRecord(PixelRecord& record, UniqueFd& descriptor);
  absl::Status Unavailable(const std::string& what) const;

  const UniqueFd socket_;
  const bool local_;
  std::atomic<bool> interrupted_{false};
  // Same host: the server's regions mapped so far (read-only), by id. Used
  // by the one thread that reads the channel.
  std::map<uint64_t, MappedRegion> regions_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_CLIENT_PIXEL_CHANNEL_READER_H_
