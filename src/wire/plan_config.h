// The epoch plan's parameters as the wire carries them (v1::PlanConfig), and
// back: the one place loader and server agree on the mapping.
#ifndef HETERODL_SRC_WIRE_PLAN_CONFIG_H_
#define HETERODL_SRC_WIRE_PLAN_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "heterodl/data_service.pb.h"
#include "src/plan/epoch_plan.h"

namespace heterodl {

// `params.num_samples` and `shard_sizes` do not travel: the fingerprint
// stands for the dataset, whose size and shards the server knows.
v1::PlanConfig ToPlanConfig(const PlanParams& params, uint64_t dataset_fingerprint,
                            const std::string& pipeline);

// The parameters of `config` over a dataset of `num_samples` in shards of
// `shard_sizes` samples (empty: a dataset of no shards).
PlanParams FromPlanConfig(const v1::PlanConfig& config, uint64_t num_samples,
                          std::vector<uint64_t> shard_sizes);

}  // namespace heterodl

#endif  // HETERODL_SRC_WIRE_PLAN_CONFIG_H_
