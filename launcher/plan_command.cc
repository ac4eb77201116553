// `heterodl plan`: which data instances to add to a GPU instance (src/plan/).
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "launcher/commands.h"
#include "launcher/flags.h"
#include "src/common/log.h"
#include "src/common/proto_json.h"
#include "src/sizing/cluster_sizing.h"

ABSL_FLAG(double, images_per_sec_per_core, 0,
          "plan: decode + augment images/s per vCPU for your pipeline (heterodl bench augment "
          "prints it)");
ABSL_FLAG(int32_t, image_size, 224, "plan: side of the square images on the wire");
ABSL_FLAG(int32_t, max_data_instances, 16, "plan: most data instances of a type to consider");
ABSL_FLAG(bool, spot, false,
          "plan: also consider spot data instances (types with a spot price in --prices)");
ABSL_FLAG(double, interruption_overhead, 0.05,
          "plan: with --spot, the share of a spot data host's time lost to interruptions "
          "(notice, drain, replacement)");

namespace heterodl {

int RunPlanCommand(const CommandContext& /*context*/) {
  Workload workload;
  workload.device_step_ms = absl::GetFlag(FLAGS_device_step_ms);
  workload.batch_per_gpu = absl::GetFlag(FLAGS_batch_size);
  workload.images_per_sec_per_core = absl::GetFlag(FLAGS_images_per_sec_per_core);
  const double side = absl::GetFlag(FLAGS_image_size);
  workload.image_bytes = side * side * 3;
  if (workload.device_step_ms <= 0 || workload.images_per_sec_per_core <= 0) {
    LogError(
        "usage: heterodl plan --device-step-ms MS --images-per-sec-per-core N "
        "[--batch-size B] [--gpu-instance TYPE] [--data-instance TYPE,...] [--image-size S] "
        "[--max-stall 0.05] [--spot [--interruption-overhead 0.05]] [--prices CSV] [--json]\n"
        "  --device-step-ms: your GPU's step time with data always ready (a run with "
        "'serve --synthetic' measures it); --images-per-sec-per-core: from 'heterodl bench "
        "augment' for your pipeline");
    return kExitUsage;
  }
  absl::StatusOr<PriceTable> prices = PriceTable::Load(absl::GetFlag(FLAGS_prices));
  if (!prices.ok()) {
    LogError("%s", prices.status().ToString());
    return kExitUsage;
  }
  PlanRequest request;
  request.gpu_instance = absl::GetFlag(FLAGS_gpu_instance);
  request.data_instances = absl::GetFlag(FLAGS_data_instance);
  request.max_data_stall = absl::GetFlag(FLAGS_max_stall);
  request.max_data_instances = absl::GetFlag(FLAGS_max_data_instances);
  request.spot = absl::GetFlag(FLAGS_spot);
  request.interruption_overhead = absl::GetFlag(FLAGS_interruption_overhead);
  absl::StatusOr<v1::SizingReport> plan = SizeCluster(workload, *prices, request);
  if (!plan.ok()) {
    LogError("%s", plan.status().ToString());
    return kExitUsage;
  }
  const std::string text = absl::GetFlag(FLAGS_json) ? ToJson(*plan) + "\n" : FormatPlan(*plan);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return kExitOk;
}

}  // namespace heterodl
