// What a benchmark's peer ran, as one line for its report: the libraries
// and versions the peer scripts (bench/peers/) write under "versions" in
// their JSON, which PeerResult.versions holds.
//
//   report.add_versions(VersionLine("PIL peer", result));
//   // "PIL peer: Pillow 13.0.0, libjpeg-turbo 3.2.0, python 3.11.7, ..."
#ifndef HETERODL_BENCH_PEER_VERSIONS_H_
#define HETERODL_BENCH_PEER_VERSIONS_H_

#include <string>

#include "absl/strings/string_view.h"
#include "heterodl/bench.pb.h"

namespace heterodl {

// "NAME: LIBRARY VERSION, ..." sorted by library (a proto map has no
// order); "NAME: not reported" when the peer wrote none.
std::string VersionLine(absl::string_view name, const v1::PeerResult& result);

}  // namespace heterodl

#endif  // HETERODL_BENCH_PEER_VERSIONS_H_
