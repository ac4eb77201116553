#include "src/client/batch_check.h"

#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace heterodl {
namespace {

absl::Duration SaneSeconds(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 1e6) {
    return absl::ZeroDuration();
  }
  return absl::Seconds(seconds);
}

}  // namespace

absl::StatusOr<uint64_t> CheckBatchHeader(const v1::Batch& header, const EpochPlan& plan,
                                          uint32_t rank, uint64_t max_batch_bytes) {
  const int64_t k = header.id().index();
  const std::vector<int64_t> expected = plan.BatchIndices(rank, k);
  const size_t n = expected.size();
  const auto malformed = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("malformed batch ", k, " of epoch ",
                                            header.id().epoch(), " from the server: ", why));
  };
  if (static_cast<size_t>(header.labels_size()) != n ||
      static_cast<size_t>(header.indices_size()) != n ||
      static_cast<size_t>(header.status_size()) != n) {
    return malformed(absl::StrCat(header.indices_size(), " indices, ", header.labels_size(),
                                  " labels and ", header.status_size(), " statuses for ", n,
                                  " planned samples"));
  }
  if (header.failed() > n) {
    return malformed("more failed samples than samples");
  }
  if (header.decoded_with_warnings() > n) {
    return malformed("more samples decoded with warnings than samples");
  }
  if (header.channels() != 3) {
    return malformed(absl::StrCat(header.channels(), " channels"));
  }
  if (header.height() == 0 || header.width() == 0 || header.height() > kMaxImageSide ||
      header.width() > kMaxImageSide) {
    return malformed(absl::StrCat("images of ", header.width(), "x", header.height()));
  }
  for (size_t i = 0; i < n; ++i) {
    if (header.indices(static_cast<int>(i)) != expected[i]) {
      return absl::DataLossError(
          absl::StrCat("batch ", k,
                       " holds other samples than the epoch plan says: the server "
                       "computes a different plan"));
    }
  }
  // Cannot overflow: n <= 2^32 samples, sides <= 2^16.
  const uint64_t bytes = static_cast<uint64_t>(n) * header.height() * header.width() * 3;
  if (bytes > max_batch_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("batch ", k, " would be ", bytes, " bytes of pixels (", n, " images of ",
                     header.width(), "x", header.height(), "), over the loader's limit of ",
                     max_batch_bytes, " (RemoteLoaderOptions::max_batch_bytes)"));
  }
  if (header.images_on_channel() != 0 && header.images_on_channel() != bytes) {
    return malformed(absl::StrCat("it announces ", header.images_on_channel(),
                                  " bytes on its pixel channel; its shape makes ", bytes));
  }
  return bytes;
}

ServerTiming TimingOf(const v1::Batch& header) {
  return {SaneSeconds(header.queue_seconds()), SaneSeconds(header.build_seconds())};
}

}  // namespace heterodl
