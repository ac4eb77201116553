// `heterodl dataset sample DIR`: writes the built-in sample dataset.
#include <tuple>
#include <utility>

#include "absl/flags/flag.h"
#include "launcher/commands.h"
#include "launcher/flags.h"
#include "src/common/log.h"
#include "src/data/sample_dataset.h"

namespace heterodl {

int RunDatasetCommand(const CommandContext& context) {
  const std::vector<std::string>& arguments = context.arguments;
  if (arguments.size() != 2 || arguments[0] != "sample") {
    LogError(
        "usage: heterodl dataset sample DIR [--images N] [--seed S] [--formats F] "
        "[--task classification|segmentation|detection] [--sample-size HxW] [--overwrite]");
    return kExitUsage;
  }
  SampleDatasetOptions options;
  options.output_dir = arguments[1];
  options.num_images = absl::GetFlag(FLAGS_images);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.overwrite = absl::GetFlag(FLAGS_overwrite);
  if (!absl::GetFlag(FLAGS_source_photos).empty()) {
    options.source_dir = absl::GetFlag(FLAGS_source_photos);
  }
  absl::StatusOr<std::vector<SampleFormatShare>> formats =
      ParseSampleFormats(absl::GetFlag(FLAGS_formats));
  if (!formats.ok()) {  // checked with the other flags; kept for direct callers
    LogError("%s", formats.status().message());
    return kExitUsage;
  }
  options.formats = *std::move(formats);
  absl::StatusOr<SampleTask> task = ParseSampleTask(absl::GetFlag(FLAGS_task));
  if (!task.ok()) {
    LogError("%s", task.status().message());
    return kExitUsage;
  }
  options.task = *task;
  absl::StatusOr<std::pair<int, int>> size = ParseSampleImageSize(absl::GetFlag(FLAGS_sample_size));
  if (!size.ok()) {
    LogError("%s", size.status().message());
    return kExitUsage;
  }
  std::tie(options.height, options.width) = *size;
  absl::Status status = WriteSampleDataset(options);
  if (!status.ok()) {
    LogError("%s", status.ToString());
    return absl::IsAlreadyExists(status) ? kExitUsage : kExitFailure;
  }
  return kExitOk;
}

}  // namespace heterodl
