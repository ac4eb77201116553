// The trainer rank's options from the flags: what `heterodl-trainer` runs
// with, and what `heterodl train` and `local` check before they start a
// server or a rank. A pure function of the flags' values (tests set flags
// and look at the options).
#ifndef HETERODL_LAUNCHER_TRAINER_FLAGS_H_
#define HETERODL_LAUNCHER_TRAINER_FLAGS_H_

#include "absl/status/statusor.h"
#include "src/train/trainer.h"

namespace heterodl {

// Every text choice parsed into its enum, the data servers as one
// ServerSources, the rendezvous and the optimizer as their own structs.
// INVALID_ARGUMENT names the flag (a usage error): an unknown choice, an
// unreadable token file. The data servers and the rank are not required
// here (`train` and `local` fill them in for their ranks); stop_requested is
// the caller's.
absl::StatusOr<TrainerOptions> TrainerOptionsFromFlags();

// The text choices alone (--optimizer, --lr-schedule, --device, --precision,
// --memory-format) parsed into `options`: what TrainerOptionsFromFlags and
// the launcher's flag checks share.
absl::Status ParseTrainerChoices(TrainerOptions& options);

}  // namespace heterodl

#endif  // HETERODL_LAUNCHER_TRAINER_FLAGS_H_
