// `heterodl bench transport`: how close the data service gets to the wire.
// A data server child process streams pre-built (synthetic, undecoded)
// batches to a RemoteLoader on loopback, once as trainers use it (pixels on
// pixel channels) and once with the pixels inside the gRPC stream (its path
// under TLS); in the same run a raw TCP pump moves the same bytes over a
// loopback socket. For several batch sizes it reports GB/s, batches/s, the
// client's CPU seconds per GB and the ratios to raw TCP.
//
//   TransportBenchOptions options;
//   options.heterodl = "/path/to/heterodl";
//   ASSIGN_OR_RETURN(std::string report, RunTransportBench(options));
#ifndef HETERODL_BENCH_TRANSPORT_BENCH_H_
#define HETERODL_BENCH_TRANSPORT_BENCH_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace heterodl {

struct TransportBenchOptions {
  std::string heterodl;  // the binary to start `serve --synthetic` with
  std::vector<int> batch_sizes = {64, 128, 256, 512};
  int image_size = 224;  // images are image_size x image_size x 3
  double seconds = 3.0;  // per measurement
  int server_threads = 2;
  int connections = 2;  // per server, for the gRPC side
  bool json = false;
};

absl::StatusOr<std::string> RunTransportBench(const TransportBenchOptions& options);

}  // namespace heterodl

#endif  // HETERODL_BENCH_TRANSPORT_BENCH_H_
