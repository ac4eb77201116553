#include "src/data/synthetic_source.h"

#include <utility>

#include "src/data/assembled_source.h"

namespace heterodl {
namespace {

// Batch sizes whose pixels are kept.
constexpr size_t kSizesKept = 4;

}  // namespace

class SyntheticSource::Batch final : public SourceBatch {
 public:
  Batch(const SyntheticSource& source, const BatchRequestSpec& request)
      : source_(source), request_(request) {}

  void BuildItem(int /*item*/) override {}

  absl::Status Finish(v1::Batch& header) override {
    WriteSlots(source_.assembler_.SyntheticSlots(request_.indices), header);
    header.set_height(static_cast<uint32_t>(source_.pipeline_.output_height()));
    header.set_width(static_cast<uint32_t>(source_.pipeline_.output_width()));
    header.set_channels(3);
    return absl::OkStatus();
  }

  StageSeconds seconds() const override { return {}; }

 private:
  const SyntheticSource& source_;
  const BatchRequestSpec request_;
};

SyntheticSource::SyntheticSource(const Dataset& dataset, Pipeline pipeline)
    : pipeline_(std::move(pipeline)),
      assembler_(dataset, pipeline_, MaskIds::kNone),
      fields_(FieldsOf(assembler_)) {}

void SyntheticSource::Describe(v1::DatasetInfo& info) const {
  *info.mutable_fields() = fields_;
  info.set_height(static_cast<uint32_t>(pipeline_.output_height()));
  info.set_width(static_cast<uint32_t>(pipeline_.output_width()));
}

absl::StatusOr<std::unique_ptr<SourceBatch>> SyntheticSource::Start(const BatchRequestSpec& request,
                                                                    BatchPayload& payload) const {
  payload.Share(PixelsOf(request.indices.size()));
  return std::make_unique<Batch>(*this, request);
}

std::shared_ptr<const std::vector<uint8_t>> SyntheticSource::PixelsOf(size_t samples) const {
  absl::MutexLock lock(&mu_);
  if (pixels_.count(samples) == 0 && pixels_.size() >= kSizesKept) {
    pixels_.erase(pixels_.begin());
  }
  std::shared_ptr<const std::vector<uint8_t>>& pixels = pixels_[samples];
  if (pixels == nullptr) {
    auto built = std::make_shared<std::vector<uint8_t>>(samples * assembler_.image_bytes());
    std::vector<int64_t> indices(samples, 0);
    StageSeconds unused;
    assembler_.Assemble({0, 0, indices}, {built->data()}, &unused);
    pixels = std::move(built);
  }
  return pixels;
}

}  // namespace heterodl
