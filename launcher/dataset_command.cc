// `heterodl dataset sample DIR`: writes the built-in sample dataset.
// `heterodl dataset index PATH`: saves the index of tar shards or TFRecord
// files beside them.
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "launcher/commands.h"
#include "launcher/flags.h"
#include "src/common/log.h"
#include "src/data/dataset.h"
#include "src/data/sample_dataset.h"
#include "src/storage/object_url.h"
#include "src/storage/s3_client.h"

namespace heterodl {
namespace {

// Writes `bytes` to the local `path` whole or not at all.
absl::Status WriteLocalFile(const std::string& path, const std::string& bytes) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out.good()) {
      return absl::UnavailableError(absl::StrCat("cannot write ", temporary));
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) {
    return absl::UnavailableError(absl::StrCat("cannot write ", path, ": ", error.message()));
  }
  return absl::OkStatus();
}

int IndexDataset(const std::string& path) {
  absl::StatusOr<DatasetLimits> limits = DatasetLimitsFromFlags(path);
  if (!limits.ok()) {
    LogError("%s", limits.status().message());
    return kExitUsage;
  }
  limits->ignore_saved_index = true;  // the files as they are now
  limits->cache_dir.clear();
  LogInfo("indexing %s: every file is read once", path);
  absl::StatusOr<Dataset> dataset = Dataset::Open(path, *limits);
  if (!dataset.ok()) {
    LogError("cannot open %s: %s", path, dataset.status().ToString());
    return kExitUsage;
  }
  absl::StatusOr<std::string> index = dataset->SerializeIndex();
  if (!index.ok()) {
    LogError("%s", index.status().message());
    return kExitUsage;
  }
  const std::string& location = dataset->index_location();
  absl::Status saved;
  if (IsObjectUrl(location)) {
    absl::StatusOr<ObjectUrl> url = ParseObjectUrl(location);
    absl::StatusOr<std::unique_ptr<S3Client>> s3 =
        S3Client::Create(limits->s3 ? *limits->s3 : S3OptionsFromEnvironment(ProcessEnvironment()));
    saved = !url.ok() ? url.status() : !s3.ok() ? s3.status() : (*s3)->Put(*url, *index);
  } else {
    saved = WriteLocalFile(location, *index);
  }
  if (!saved.ok()) {
    LogError("cannot save the index: %s", saved.ToString());
    return kExitFailure;
  }
  LogInfo(
      "saved the index of %d samples to %s (%d KiB): servers opening %s read it instead of "
      "its files",
      dataset->size(), location, index->size() >> 10, path);
  return kExitOk;
}

}  // namespace

int RunDatasetCommand(const CommandContext& context) {
  const std::vector<std::string>& arguments = context.arguments;
  if (arguments.size() == 2 && arguments[0] == "index") {
    return IndexDataset(arguments[1]);
  }
  if (arguments.size() != 2 || arguments[0] != "sample") {
    LogError(
        "usage: heterodl dataset sample DIR [--images N] [--seed S] [--formats F] "
        "[--task classification|segmentation|detection] [--sample-size HxW] [--overwrite]\n"
        "       heterodl dataset index PATH|s3://BUCKET/KEY [--tfrecord-*-key ...] [--s3-* ...]");
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
