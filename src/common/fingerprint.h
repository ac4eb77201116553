// Fingerprint: a stable 64-bit digest (FNV-1a) of a sequence of fields.
//
// Unlike absl::Hash, the value is the same in every process and build, so a
// client and a server can compare the fingerprints of their datasets.
#ifndef HETERODL_SRC_COMMON_FINGERPRINT_H_
#define HETERODL_SRC_COMMON_FINGERPRINT_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace heterodl {

class Fingerprint {
 public:
  // Each field is length-prefixed, so ("ab","c") and ("a","bc") differ.
  Fingerprint& Add(absl::string_view bytes);
  Fingerprint& Add(uint64_t value);
  uint64_t value() const { return state_; }

 private:
  void Mix(const void* data, size_t size);

  uint64_t state_ = 0xcbf29ce484222325ull;
};

// "0123456789abcdef": how fingerprints appear in logs and errors.
std::string FingerprintToHex(uint64_t fingerprint);

}  // namespace heterodl

#endif  // HETERODL_SRC_COMMON_FINGERPRINT_H_
