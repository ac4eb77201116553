#include "src/train/metrics_writer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "heterodl/metrics.pb.h"
#include "src/common/log.h"
#include "src/common/proto_json.h"
#include "src/metrics/feed_metrics.h"

namespace heterodl {

absl::StatusOr<std::unique_ptr<MetricsWriter>> MetricsWriter::Open(const std::string& path,
                                                                   uint32_t rank, bool append) {
  std::FILE* file = nullptr;
  if (!path.empty()) {
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    std::error_code ignored;  // fopen reports what matters
    if (!parent.empty()) {
      std::filesystem::create_directories(parent, ignored);
    }
    file = std::fopen(path.c_str(), append ? "a" : "w");
    if (file == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("cannot create metrics file '", path, "': ", std::strerror(errno)));
    }
  }
  return std::unique_ptr<MetricsWriter>(new MetricsWriter(file, path, rank));
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) {
    std::fclose(file_);
  }
}

void MetricsWriter::RecordStep(const StepRecord& record) {
  totals_.steps += 1;
  totals_.images += record.batch_size;
  totals_.step_ms += record.step_ms;
  totals_.data_wait_ms += record.data_wait_ms;
  totals_.last_loss = record.loss;
  totals_.failed_samples += record.failed_samples;
  if (file_ == nullptr) {
    return;
  }
  v1::StepMetrics metrics;
  metrics.set_step(record.step);
  metrics.set_epoch(record.epoch);
  metrics.set_rank(rank_);
  metrics.set_step_ms(record.step_ms);
  metrics.set_data_wait_ms(record.data_wait_ms);
  metrics.set_compute_ms(record.step_ms - record.data_wait_ms);
  metrics.set_loss(record.loss);
  metrics.set_images_per_sec(record.images_per_sec);
  metrics.set_batch_size(record.batch_size);
  metrics.set_failed_samples(record.failed_samples);
  metrics.set_learning_rate(record.learning_rate);
  if (record.data_hosts > 0) {
    // All ranks' samples of this step.
    const double samples = record.images_per_sec * record.step_ms / 1000;
    const std::optional<int> needed =
        DataHostsForStall(samples, (record.step_ms - record.data_wait_ms) / 1000,
                          record.data_capacity_per_host, kSizingStall);
    if (needed) {
      metrics.set_data_capacity_per_host(record.data_capacity_per_host);
      metrics.set_data_hosts(static_cast<uint32_t>(record.data_hosts));
      metrics.set_data_hosts_needed(static_cast<uint32_t>(*needed));
    }
  }
  WriteLine(ToJson(metrics) + "\n");
}

void MetricsWriter::WriteLine(const std::string& line) {
  if (file_ == nullptr || failed_) {
    return;
  }
  if (std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0) {
    return;
  }
  // Training goes on without its metrics rather than stopping; once said.
  failed_ = true;
  LogWarning("metrics file '%s': write failed (%s); no more metrics are written to it", path_,
             std::strerror(errno));
}

std::string MetricsWriter::WriteSummary(const RunTotals& all_ranks, uint32_t world_size,
                                        double wall_seconds) {
  v1::RunSummary summary;
  const double steps = static_cast<double>(all_ranks.steps);
  summary.set_steps(world_size > 0 ? all_ranks.steps / world_size : 0);
  summary.set_world_size(world_size);
  summary.set_images(all_ranks.images);
  summary.set_wall_seconds(wall_seconds);
  summary.set_mean_step_ms(steps > 0 ? all_ranks.step_ms / steps : 0);
  summary.set_mean_data_wait_ms(steps > 0 ? all_ranks.data_wait_ms / steps : 0);
  summary.set_data_stall_percent(
      all_ranks.step_ms > 0 ? 100.0 * all_ranks.data_wait_ms / all_ranks.step_ms : 0);
  summary.set_images_per_sec(wall_seconds > 0 ? all_ranks.images / wall_seconds : 0);
  summary.set_final_loss(all_ranks.last_loss);
  summary.set_failed_samples(all_ranks.failed_samples);
  std::string json = ToJson(summary);
  WriteLine(absl::StrCat("{\"summary\":", json, "}\n"));
  return json;
}

}  // namespace heterodl
