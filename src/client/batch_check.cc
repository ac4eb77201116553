#include "src/client/batch_check.h"

#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/wire/batch_layout.h"

namespace heterodl {
namespace {

absl::Duration SaneSeconds(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 1e6) {
    return absl::ZeroDuration();
  }
  return absl::Seconds(seconds);
}

}  // namespace

absl::StatusOr<uint64_t> CheckBatchHeader(
    const v1::Batch& header, const EpochPlan& plan, uint32_t rank,
    const google::protobuf::RepeatedPtrField<v1::FieldSpec>& fields, uint64_t max_batch_bytes,
    bool user_fields) {
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
  size_t not_ok = 0;
  for (const int status : header.status()) {
    if (status != v1::SAMPLE_OK && status != v1::SAMPLE_REPLACED &&
        status != v1::SAMPLE_ZERO_FILLED) {
      return malformed(absl::StrCat("a sample status ", status, " of no known meaning"));
    }
    not_ok += status != v1::SAMPLE_OK ? 1 : 0;
  }
  if (header.failed() != not_ok) {
    return malformed(
        absl::StrCat(header.failed(), " failed samples where ", not_ok, " statuses say so"));
  }
  if (header.sources_size() != 0 && static_cast<size_t>(header.sources_size()) != n) {
    return malformed(absl::StrCat(header.sources_size(), " sources for ", n, " samples"));
  }
  if (header.sources_size() == 0 && not_ok > 0) {
    return malformed("failed samples and no sources");
  }
  for (int i = 0; i < header.sources_size(); ++i) {
    const int64_t source = header.sources(i);
    const bool filled = header.status(i) != v1::SAMPLE_ZERO_FILLED;
    if (filled ? (source < 0 || static_cast<uint64_t>(source) >= plan.params().num_samples)
               : source != -1) {
      return malformed(absl::StrCat("slot ", i, "'s source ", source));
    }
  }
  if (static_cast<size_t>(header.failures_size()) > not_ok) {
    return malformed(
        absl::StrCat(header.failures_size(), " failure reasons for ", not_ok, " failed samples"));
  }
  if (header.decoded_with_warnings() > n) {
    return malformed("more samples decoded with warnings than samples");
  }
  if (user_fields) {
    // Only a dataset of (image, label) pairs says its images' size
    // (IsLabelledImages): that of its first field.
    const bool sized = header.channels() != 0 || header.height() != 0 || header.width() != 0;
    const v1::FieldSpec& first = fields[0];
    if (sized && (first.dtype() != v1::DTYPE_UINT8 || first.shape_size() != 3 ||
                  first.shape(0) != header.height() || first.shape(1) != header.width() ||
                  first.shape(2) != header.channels())) {
      return malformed("an image size in a batch of a user's own dataset other than its images'");
    }
  } else if (header.channels() != 3) {
    return malformed(absl::StrCat(header.channels(), " channels"));
  } else if (header.height() == 0 || header.width() == 0 || header.height() > kMaxImageSide ||
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
  for (const v1::FieldSpec& field : fields) {
    if (!user_fields && field.name() == "images" &&
        (field.shape_size() != 3 || field.shape(0) != header.height() ||
         field.shape(1) != header.width())) {
      return malformed(absl::StrCat("images of ", header.width(), "x", header.height(),
                                    " where the server declared others"));
    }
  }
  absl::StatusOr<BatchLayout> layout =
      LayOutBatch(fields, static_cast<uint32_t>(n), header.ragged_lengths(),
                  header.collated_shapes(), max_batch_bytes);
  if (absl::IsFailedPrecondition(layout.status())) {
    return absl::FailedPreconditionError(
        absl::StrCat("batch ", k, ": ", layout.status().message()));
  }
  if (!layout.ok()) {
    return malformed(layout.status().message());
  }
  const uint64_t bytes = layout->payload_bytes;
  if (header.images_on_channel() != 0 && header.images_on_channel() != bytes) {
    return malformed(absl::StrCat("it announces ", header.images_on_channel(),
                                  " bytes on its pixel channel; its fields make ", bytes));
  }
  return bytes;
}

ServerTiming TimingOf(const v1::Batch& header) {
  return {SaneSeconds(header.queue_seconds()), SaneSeconds(header.build_seconds())};
}

}  // namespace heterodl
