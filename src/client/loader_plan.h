// The epochs' plan a loader's options ask for, for the code that must know
// it beside the loader (the trainer's resume at another world size). Kept
// out of remote_loader.h, which is installed for users and names no
// src/plan type.
//
//   PlanParams written = PlanParamsOf(options, dataset.num_samples);
//   written.world_size = checkpoint.world_size;
#ifndef HETERODL_SRC_CLIENT_LOADER_PLAN_H_
#define HETERODL_SRC_CLIENT_LOADER_PLAN_H_

#include <cstdint>

#include "src/client/remote_loader.h"
#include "src/plan/epoch_plan.h"

namespace heterodl {

// The epochs' plan `options` ask for over a dataset of `num_samples`; a
// block shuffle's shard sizes are the caller's to add (the servers' say).
PlanParams PlanParamsOf(const RemoteLoaderOptions& options, uint64_t num_samples);

}  // namespace heterodl

#endif  // HETERODL_SRC_CLIENT_LOADER_PLAN_H_
