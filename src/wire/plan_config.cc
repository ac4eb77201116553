#include "src/wire/plan_config.h"

#include <utility>

namespace heterodl {

v1::PlanConfig ToPlanConfig(const PlanParams& params, uint64_t dataset_fingerprint,
                            const std::string& pipeline) {
  v1::PlanConfig config;
  config.set_dataset_fingerprint(dataset_fingerprint);
  config.set_seed(params.seed);
  config.set_world_size(params.world_size);
  config.set_batch_size(params.batch_size);
  config.set_drop_last(params.drop_last);
  config.set_sequential(!params.shuffle);
  config.set_shuffle_block_shards(params.shuffle_block_shards);
  config.set_epoch_offset(params.epoch_offset);
  config.set_pipeline(pipeline);
  return config;
}

PlanParams FromPlanConfig(const v1::PlanConfig& config, uint64_t num_samples,
                          std::vector<uint64_t> shard_sizes) {
  PlanParams params;
  params.num_samples = num_samples;
  params.seed = config.seed();
  params.world_size = config.world_size();
  params.batch_size = config.batch_size();
  params.drop_last = config.drop_last();
  params.shuffle = !config.sequential();
  params.shuffle_block_shards = config.shuffle_block_shards();
  params.epoch_offset = config.epoch_offset();
  if (params.shuffle_block_shards > 0) {
    params.shard_sizes = std::move(shard_sizes);
  }
  return params;
}

}  // namespace heterodl
