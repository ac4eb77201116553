// Cluster sizing (heterodl plan): given how fast one core decodes and augments, how
// long the accelerator needs per step, the batch, the bytes per image and a
// price table, it predicts the step time and cost of a GPU instance alone
// (homogeneous) and with N data instances of each CPU-only type, and picks
// the cheapest per step whose data stall stays under a target.
//
// The model: a step takes as long as the slowest of
//   the accelerator     device_step_ms;
//   decode + augment    images per step / (cores decoding * images/s per core);
//   the network         bytes per step / (usable bandwidth into the GPU host),
// because the three overlap (the loader prefetches). Homogeneous, the GPU
// instance decodes on its own vCPUs less those its trainer processes use;
// heterogeneous, the data instances' vCPUs decode and the batches cross the
// network (the lesser of the data group's and the GPU instance's bandwidth,
// times an efficiency).
//
//   ASSIGN_OR_RETURN(PriceTable prices, PriceTable::Load("bench/prices.csv"));
//   ASSIGN_OR_RETURN(v1::SizingReport plan, SizeCluster(workload, prices, request));
#ifndef HETERODL_SRC_SIZING_CLUSTER_SIZING_H_
#define HETERODL_SRC_SIZING_CLUSTER_SIZING_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "heterodl/sizing.pb.h"

namespace heterodl {

class PriceTable {
 public:
  // CSV: instance_type,vcpus,gpus,usd_per_hour,network_gbps[,spot_usd_per_hour]
  // ('#' comments; the spot price may be left empty). Errors name the source
  // and line.
  static absl::StatusOr<PriceTable> Parse(const std::string& text, const std::string& source);
  static absl::StatusOr<PriceTable> Load(const std::string& path);

  // NOT_FOUND naming the known types.
  absl::StatusOr<v1::InstanceType> Find(const std::string& name) const;
  const std::vector<v1::InstanceType>& instances() const { return instances_; }

 private:
  std::vector<v1::InstanceType> instances_;
};

struct Workload {
  double device_step_ms = 0;  // the accelerators' compute per step
  int batch_per_gpu = 0;
  double images_per_sec_per_core = 0;  // decode + augment, per vCPU
  double image_bytes = 224 * 224 * 3;  // uint8 HWC on the wire
  // vCPUs each trainer process keeps busy on the GPU instance (homogeneous).
  double trainer_vcpus_per_gpu = 1;
  // Share of the advertised bandwidth batches get (gRPC reached 0.8-0.9 of
  // raw TCP in bench transport; TCP itself does not reach line rate).
  double network_efficiency = 0.7;
  // When the "accelerator" is the host CPU itself (a LibTorch CPU step), it
  // cannot overlap with decoding on the same cores: homogeneous, the two add.
  bool device_uses_host_cpu = false;
};

// How the data instances are bought.
struct DataPurchase {
  // Spot (interruptible) at the table's spot price.
  bool spot = false;
  // Spot: the share of a data host's time lost to interruptions (the notice,
  // the drain, the wait for a replacement; nothing a job needs is lost, see
  // docs/operations.md): its decode capacity counts for 1 - this.
  double interruption_overhead = 0;
};

// The step time, stall, bound and cost of one cluster shape.
// `data` may be null (homogeneous; `data_instances` must then be 0).
// REQUIRES: `data` has a spot price when purchase.spot.
v1::ClusterEstimate Estimate(const Workload& workload, const v1::InstanceType& gpu,
                             const v1::InstanceType* data, int data_instances,
                             const DataPurchase& purchase = {});

// The price side of a measured run: cost per hour and per step of the shape,
// with `step_ms` as measured (no bound or stall).
v1::ClusterEstimate PriceMeasured(const v1::InstanceType& gpu, const v1::InstanceType* data,
                                  int data_instances, double step_ms, bool data_spot = false);

struct PlanRequest {
  std::string gpu_instance;
  // CPU-only types to consider; empty: every type in the table without GPUs
  // bought where the GPU instance is (ml.* types with an ml.* GPU instance).
  std::vector<std::string> data_instances;
  int max_data_instances = 16;
  double max_data_stall = 0.05;
  // Also consider spot data instances (types with a spot price).
  bool spot = false;
  double interruption_overhead = 0.05;  // see DataPurchase
};

// INVALID_ARGUMENT for a workload or request that makes no sense (no GPU in
// the GPU instance, a non-positive rate, ...), naming it.
absl::StatusOr<v1::SizingReport> SizeCluster(const Workload& workload, const PriceTable& prices,
                                             const PlanRequest& request);

// The data group sized from measurements (`heterodl status --demand`): how
// many data hosts that each build `capacity_per_host` images/s keep the data
// stall at or under `max_stall` when the accelerators would consume
// `demand` images/s without waiting. The planner's decode bound: the step
// waits for data when the hosts build fewer than demand * (1 - max_stall)
// images/s, and the stall is then 1 - rate / demand. At least 1.
// INVALID_ARGUMENT for a non-positive demand or capacity, or a stall outside
// [0, 1).
absl::StatusOr<int> DataHostsNeeded(double demand, double capacity_per_host, double max_stall);

// "1 x ml.p3.2xlarge + 2 x ml.c5.9xlarge", "... + 3 x c5.12xlarge (spot)".
std::string ShapeName(const v1::ClusterEstimate& estimate);

// The plan as a table and a recommendation, for people.
std::string FormatPlan(const v1::SizingReport& plan);

}  // namespace heterodl

#endif  // HETERODL_SRC_SIZING_CLUSTER_SIZING_H_
