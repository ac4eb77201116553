// `heterodl dataset sample DIR`: writes the built-in sample dataset.
#include "absl/flags/flag.h"
#include "launcher/commands.h"
#include "launcher/flags.h"
#include "src/common/log.h"
#include "src/data/sample_dataset.h"

namespace heterodl {

int RunDatasetCommand(const std::vector<std::string>& arguments) {
  if (arguments.size() != 2 || arguments[0] != "sample") {
    LogError("usage: heterodl dataset sample DIR [--images N] [--seed S] [--overwrite]");
    return kExitUsage;
  }
  SampleDatasetOptions options;
  options.output_dir = arguments[1];
  options.num_images = absl::GetFlag(FLAGS_images);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.overwrite = absl::GetFlag(FLAGS_overwrite);
  absl::Status status = WriteSampleDataset(options);
  if (!status.ok()) {
    LogError("%s", status.ToString());
    return absl::IsAlreadyExists(status) ? kExitUsage : kExitFailure;
  }
  return kExitOk;
}

}  // namespace heterodl
