#include "src/sizing/cluster_sizing.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "src/common/read_file.h"
#include "src/common/status_macros.h"

namespace heterodl {
namespace {

constexpr double kMsPerHour = 3.6e6;

}  // namespace

absl::StatusOr<int> DataHostsNeeded(double demand, double capacity_per_host, double max_stall) {
  if (!(demand > 0) || !(capacity_per_host > 0) || std::isinf(demand)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sizing needs a positive demand and host capacity (images/s), got ", demand,
                     " and ", capacity_per_host));
  }
  if (!(max_stall >= 0 && max_stall < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("max stall must be in [0, 1), got ", max_stall));
  }
  const double hosts = std::ceil(demand * (1 - max_stall) / capacity_per_host - 1e-9);
  return static_cast<int>(std::clamp(hosts, 1.0, 1e6));
}

std::string ShapeName(const v1::ClusterEstimate& estimate) {
  if (estimate.data_instances() == 0) {
    return absl::StrCat("1 x ", estimate.gpu_instance());
  }
  return absl::StrCat("1 x ", estimate.gpu_instance(), " + ", estimate.data_instances(), " x ",
                      estimate.data_instance(), estimate.data_spot() ? " (spot)" : "");
}

absl::StatusOr<PriceTable> PriceTable::Parse(const std::string& text, const std::string& source) {
  PriceTable table;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') {
      continue;
    }
    const std::vector<std::string> fields = absl::StrSplit(line, ',');
    v1::InstanceType instance;
    uint32_t vcpus = 0;
    uint32_t gpus = 0;
    double price = 0;
    double gbps = 0;
    double spot = 0;
    const bool has_spot = fields.size() == 6 && !fields[5].empty();
    if ((fields.size() != 5 && fields.size() != 6) || fields[0].empty() ||
        !absl::SimpleAtoi(fields[1], &vcpus) || !absl::SimpleAtoi(fields[2], &gpus) ||
        !absl::SimpleAtod(fields[3], &price) || !absl::SimpleAtod(fields[4], &gbps) || vcpus == 0 ||
        price <= 0 || gbps <= 0 ||
        (has_spot && (!absl::SimpleAtod(fields[5], &spot) || spot <= 0))) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ":", line_number,
          ": expected instance_type,vcpus,gpus,usd_per_hour,network_gbps[,spot_usd_per_hour] "
          "with positive numbers, got '",
          line, "'"));
    }
    instance.set_spot_usd_per_hour(spot);
    instance.set_name(fields[0]);
    instance.set_vcpus(vcpus);
    instance.set_gpus(gpus);
    instance.set_usd_per_hour(price);
    instance.set_network_gbps(gbps);
    table.instances_.push_back(instance);
  }
  if (table.instances_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": no instance types"));
  }
  return table;
}

absl::StatusOr<PriceTable> PriceTable::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return Parse(text, path);
}

absl::StatusOr<v1::InstanceType> PriceTable::Find(const std::string& name) const {
  std::vector<std::string> known;
  for (const v1::InstanceType& instance : instances_) {
    if (instance.name() == name) {
      return instance;
    }
    known.push_back(instance.name());
  }
  return absl::NotFoundError(absl::StrCat("instance type '", name,
                                          "' is not in the price table (it has ",
                                          absl::StrJoin(known, ", "), ")"));
}

v1::ClusterEstimate PriceMeasured(const v1::InstanceType& gpu, const v1::InstanceType* data,
                                  int data_instances, double step_ms, bool data_spot) {
  v1::ClusterEstimate estimate;
  estimate.set_gpu_instance(gpu.name());
  estimate.set_gpu_instances(1);
  double price = gpu.usd_per_hour();
  if (data != nullptr && data_instances > 0) {
    estimate.set_data_instance(data->name());
    estimate.set_data_instances(static_cast<uint32_t>(data_instances));
    estimate.set_data_spot(data_spot);
    price += data_instances * (data_spot ? data->spot_usd_per_hour() : data->usd_per_hour());
  }
  estimate.set_usd_per_hour(price);
  estimate.set_step_ms(step_ms);
  estimate.set_usd_per_step(price * step_ms / kMsPerHour);
  return estimate;
}

v1::ClusterEstimate Estimate(const Workload& workload, const v1::InstanceType& gpu,
                             const v1::InstanceType* data, int data_instances,
                             const DataPurchase& purchase) {
  const bool homogeneous = data == nullptr || data_instances == 0;
  const double images = static_cast<double>(workload.batch_per_gpu) * gpu.gpus();
  double decode_ms;
  double network_ms = 0;
  if (homogeneous) {
    const double cores = std::max(0.0, gpu.vcpus() - workload.trainer_vcpus_per_gpu * gpu.gpus());
    decode_ms = cores > 0 ? images / (cores * workload.images_per_sec_per_core) * 1000
                          : std::numeric_limits<double>::infinity();
  } else {
    const double available = purchase.spot ? 1 - purchase.interruption_overhead : 1;
    decode_ms = images /
                (static_cast<double>(data_instances) * data->vcpus() *
                 workload.images_per_sec_per_core * available) *
                1000;
    const double gbps = std::min(data_instances * data->network_gbps(), gpu.network_gbps()) *
                        workload.network_efficiency;
    network_ms = images * workload.image_bytes * 8 / (gbps * 1e9) * 1000;
  }
  double step_ms;
  std::string bound;
  if (workload.device_uses_host_cpu && homogeneous) {
    // The host CPU is the accelerator: decoding takes turns with it.
    step_ms = workload.device_step_ms + decode_ms;
    bound = decode_ms > workload.device_step_ms ? "cpu" : "gpu";
  } else {
    step_ms = std::max({workload.device_step_ms, decode_ms, network_ms});
    bound = step_ms == workload.device_step_ms ? "gpu" : step_ms == decode_ms ? "cpu" : "network";
  }
  v1::ClusterEstimate estimate =
      PriceMeasured(gpu, data, data_instances, step_ms, purchase.spot && !homogeneous);
  estimate.set_bound(bound);
  estimate.set_data_stall(step_ms > 0 ? 1.0 - workload.device_step_ms / step_ms : 0);
  return estimate;
}

namespace {

absl::Status ValidateWorkload(const Workload& workload) {
  if (workload.device_step_ms <= 0 || workload.batch_per_gpu <= 0 ||
      workload.images_per_sec_per_core <= 0 || workload.image_bytes <= 0) {
    return absl::InvalidArgumentError(
        "plan needs a positive device step time, batch size, images/s per core and image size");
  }
  return absl::OkStatus();
}

// SageMaker's types ("ml.*") are bought with SageMaker, the rest directly.
bool OnSageMaker(const std::string& instance_type) {
  return absl::StartsWith(instance_type, "ml.");
}

// The instance types a data group may be made of: those asked for, or every
// type without a GPU bought where `gpu` is (one SageMaker job cannot mix its
// instances with EC2's).
absl::StatusOr<std::vector<v1::InstanceType>> DataInstanceTypes(const PriceTable& prices,
                                                                const v1::InstanceType& gpu,
                                                                const PlanRequest& request) {
  std::vector<v1::InstanceType> types;
  if (request.data_instances.empty()) {
    for (const v1::InstanceType& instance : prices.instances()) {
      if (instance.gpus() == 0 && OnSageMaker(instance.name()) == OnSageMaker(gpu.name())) {
        types.push_back(instance);
      }
    }
    return types;
  }
  for (const std::string& name : request.data_instances) {
    ASSIGN_OR_RETURN(v1::InstanceType instance, prices.Find(name));
    types.push_back(instance);
  }
  return types;
}

// Every shape: the GPU instance alone, then 1, 2, ... instances of each data
// type until adding one no longer makes the step faster (the GPU or the
// network bounds it).
void ConsiderShapes(const Workload& workload, const v1::InstanceType& gpu,
                    const std::vector<v1::InstanceType>& data_types, const PlanRequest& request,
                    v1::SizingReport& plan) {
  *plan.mutable_homogeneous() = Estimate(workload, gpu, nullptr, 0);
  const double baseline = plan.homogeneous().usd_per_step();
  plan.mutable_homogeneous()->set_price_performance_improvement(0);
  std::vector<DataPurchase> purchases = {DataPurchase{}};
  if (request.spot) {
    purchases.push_back({true, request.interruption_overhead});
  }
  for (const DataPurchase& purchase : purchases) {
    for (const v1::InstanceType& data : data_types) {
      if (purchase.spot && data.spot_usd_per_hour() <= 0) {
        continue;  // no spot price known
      }
      for (int n = 1; n <= request.max_data_instances; ++n) {
        v1::ClusterEstimate estimate = Estimate(workload, gpu, &data, n, purchase);
        estimate.set_price_performance_improvement(1.0 - estimate.usd_per_step() / baseline);
        *plan.add_considered() = estimate;
        if (estimate.bound() != "cpu") {
          break;
        }
      }
    }
  }
}

// The cheapest shape per step within the stall target; if none is, the
// fastest (`within_target` says which).
const v1::ClusterEstimate& ChooseShape(const v1::SizingReport& plan, double max_data_stall,
                                       bool& within_target) {
  std::vector<const v1::ClusterEstimate*> all = {&plan.homogeneous()};
  for (const v1::ClusterEstimate& estimate : plan.considered()) {
    all.push_back(&estimate);
  }
  const v1::ClusterEstimate* best = nullptr;
  for (const v1::ClusterEstimate* estimate : all) {
    if (estimate->data_stall() > max_data_stall + 1e-12) {
      continue;
    }
    if (best == nullptr || estimate->usd_per_step() < best->usd_per_step()) {
      best = estimate;
    }
  }
  within_target = best != nullptr;
  if (within_target) {
    return *best;
  }
  for (const v1::ClusterEstimate* estimate : all) {
    if (best == nullptr || estimate->step_ms() < best->step_ms()) {
      best = estimate;
    }
  }
  return *best;
}

// Why `best` is recommended, in words a buyer reads.
std::string ExplainChoice(const Workload& workload, const v1::InstanceType& gpu,
                          const PriceTable& prices, const v1::SizingReport& plan,
                          const v1::ClusterEstimate& best, bool within_target,
                          double max_data_stall) {
  const v1::ClusterEstimate& homogeneous = plan.homogeneous();
  const double images_per_sec =
      workload.batch_per_gpu * gpu.gpus() * 1000.0 / workload.device_step_ms;
  std::string reason = absl::StrFormat(
      "The GPUs of a %s consume %.0f images/s (%d per step every %.1f ms). Alone it is %s-bound: "
      "%.1f ms per step, %.0f%% data stall, $%.6f per step.",
      gpu.name(), images_per_sec, workload.batch_per_gpu * static_cast<int>(gpu.gpus()),
      workload.device_step_ms, homogeneous.bound(), homogeneous.step_ms(),
      100 * homogeneous.data_stall(), homogeneous.usd_per_step());
  if (best.data_instances() == 0) {
    absl::StrAppend(&reason, within_target
                                 ? " Its own CPUs keep up: adding data instances only adds cost."
                                 : " No data group helps within the table's types.");
    return reason;
  }
  absl::StrAppendFormat(
      &reason,
      " With %d x %s (%d vCPUs decoding) the step is %s-bound: %.1f ms, %.0f%% stall, $%.6f per "
      "step, %.0f%% better price-performance.",
      best.data_instances(), best.data_instance(),
      best.data_instances() * static_cast<int>(prices.Find(best.data_instance()).value().vcpus()),
      best.bound(), best.step_ms(), 100 * best.data_stall(), best.usd_per_step(),
      100 * best.price_performance_improvement());
  if (!within_target) {
    absl::StrAppendFormat(&reason, " No shape meets the %.0f%% stall target; this is the fastest.",
                          100 * max_data_stall);
  }
  if (best.bound() == "network") {
    absl::StrAppend(&reason,
                    " The network into the GPU instance is the limit: more data instances "
                    "will not help; smaller images on the wire (crop on the data group) would.");
  }
  return reason;
}

}  // namespace

absl::StatusOr<v1::SizingReport> SizeCluster(const Workload& workload, const PriceTable& prices,
                                             const PlanRequest& request) {
  RETURN_IF_ERROR(ValidateWorkload(workload));
  ASSIGN_OR_RETURN(const v1::InstanceType gpu, prices.Find(request.gpu_instance));
  if (gpu.gpus() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", gpu.name(), "' has no GPU in the price table"));
  }
  if (!(request.interruption_overhead >= 0 && request.interruption_overhead < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the interruption overhead must be in [0, 1), got ", request.interruption_overhead));
  }
  ASSIGN_OR_RETURN(const std::vector<v1::InstanceType> data_types,
                   DataInstanceTypes(prices, gpu, request));
  v1::SizingReport plan;
  plan.set_spot(request.spot);
  if (request.spot) {
    plan.set_interruption_overhead(request.interruption_overhead);
  }
  plan.set_device_step_ms(workload.device_step_ms);
  plan.set_batch_per_gpu(static_cast<uint32_t>(workload.batch_per_gpu));
  plan.set_images_per_sec_per_core(workload.images_per_sec_per_core);
  plan.set_image_bytes(workload.image_bytes);
  plan.set_max_data_stall(request.max_data_stall);
  ConsiderShapes(workload, gpu, data_types, request, plan);
  bool within_target = false;
  const v1::ClusterEstimate& best = ChooseShape(plan, request.max_data_stall, within_target);
  *plan.mutable_recommended() = best;
  if (best.data_instances() == 0) {
    plan.mutable_recommended()->set_price_performance_improvement(0);
  }
  plan.set_reason(
      ExplainChoice(workload, gpu, prices, plan, best, within_target, request.max_data_stall));
  if (request.spot) {
    const bool any_spot_price =
        std::any_of(data_types.begin(), data_types.end(),
                    [](const auto& t) { return t.spot_usd_per_hour() > 0; });
    plan.set_reason(absl::StrCat(
        plan.reason(),
        any_spot_price
            ? absl::StrFormat(" Spot data hosts are counted at %.0f%% of their capacity (the "
                              "interruption overhead); an interrupted one drains and hands its "
                              "batches to the others, so none is lost.",
                              100 * (1 - request.interruption_overhead))
            : std::string(" None of these data types has a spot price in the table.")));
  }
  return plan;
}

std::string FormatPlan(const v1::SizingReport& plan) {
  std::string text = absl::StrFormat(
      "plan: device step %.1f ms, batch %d per GPU, %.0f images/s per vCPU, %.0f bytes per image, "
      "stall target %.0f%%\n\n  %-48s %10s %8s %9s %11s %8s %9s\n",
      plan.device_step_ms(), plan.batch_per_gpu(), plan.images_per_sec_per_core(),
      plan.image_bytes(), 100 * plan.max_data_stall(), "configuration", "$/hour", "step ms",
      "stall", "$/step", "bound", "vs homo");
  auto row = [&text](const v1::ClusterEstimate& e) {
    absl::StrAppendFormat(&text, "  %-48s %10.3f %8.1f %8.0f%% %11.6f %8s %8.0f%%\n", ShapeName(e),
                          e.usd_per_hour(), e.step_ms(), 100 * e.data_stall(), e.usd_per_step(),
                          e.bound(), 100 * e.price_performance_improvement());
  };
  row(plan.homogeneous());
  for (const v1::ClusterEstimate& estimate : plan.considered()) {
    row(estimate);
  }
  absl::StrAppendFormat(&text, "\nrecommended: %s\n%s\n", ShapeName(plan.recommended()),
                        plan.reason());
  return text;
}

}  // namespace heterodl
