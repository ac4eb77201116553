#include "src/common/fingerprint.h"

#include <string>

#include "absl/strings/str_format.h"

namespace heterodl {

void Fingerprint::Mix(const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    state_ ^= bytes[i];
    state_ *= 0x100000001b3ull;
  }
}

Fingerprint& Fingerprint::Add(uint64_t value) {
  unsigned char bytes[8];
  for (int i = 0; i < 8; ++i) {
    bytes[i] = static_cast<unsigned char>(value >> (8 * i));
  }
  Mix(bytes, sizeof(bytes));
  return *this;
}

Fingerprint& Fingerprint::Add(absl::string_view bytes) {
  Add(static_cast<uint64_t>(bytes.size()));
  Mix(bytes.data(), bytes.size());
  return *this;
}

std::string FingerprintToHex(uint64_t fingerprint) { return absl::StrFormat("%016x", fingerprint); }

}  // namespace heterodl
