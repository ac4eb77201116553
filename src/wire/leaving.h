// How a data server says it is leaving (SIGTERM, a spot interruption notice,
// a scale-down): each of its batch streams ends with UNAVAILABLE and this key
// in its trailing metadata, once the batches it was building are sent. The
// loader then asks the other servers for what it still owed, at once and
// without a warning (docs/operations.md, "An elastic data group").
#ifndef HETERODL_SRC_WIRE_LEAVING_H_
#define HETERODL_SRC_WIRE_LEAVING_H_

namespace heterodl {

inline constexpr char kLeavingMetadataKey[] = "heterodl-leaving";

}  // namespace heterodl

#endif  // HETERODL_SRC_WIRE_LEAVING_H_
