// The sources of a user's own Python dataset (serve --python-dataset):
//   - PythonSampleSource: each item a sample, made by a worker straight
//     into its rows of every dense field; its ragged fields come back with
//     the slot and are placed after the dense ones when the batch finishes;
//   - PythonCollatedSource (the module has a collate_fn): a batch is one
//     item, made and collated whole by one worker, in a buffer of the size
//     it turned out to need.
// PythonSources is what the server serves: the dataset and its one source
// (a pipeline does not apply: the samples are its own code's).
#ifndef HETERODL_SRC_DATA_PYTHON_PYTHON_SOURCES_H_
#define HETERODL_SRC_DATA_PYTHON_PYTHON_SOURCES_H_

#include <memory>
#include <string>

#include "src/data/batch_source.h"
#include "src/data/python/python_dataset.h"

namespace heterodl {

class PythonSampleSource final : public BatchSource {
 public:
  explicit PythonSampleSource(std::shared_ptr<PythonDataset> python);

  // BatchSource.
  const FieldSpecs& fields() const override { return python_->fields(); }
  double ItemCost(uint32_t /*samples*/) const override { return 1; }
  void Describe(v1::DatasetInfo& info) const override;
  absl::StatusOr<std::unique_ptr<SourceBatch>> Start(const BatchRequestSpec& request,
                                                     BatchPayload& payload) const override;

 private:
  class Batch;
  const std::shared_ptr<PythonDataset> python_;
};

class PythonCollatedSource final : public BatchSource {
 public:
  // REQUIRES: python->collates().
  explicit PythonCollatedSource(std::shared_ptr<PythonDataset> python);

  // BatchSource.
  const FieldSpecs& fields() const override { return python_->fields(); }
  int Items(uint32_t /*samples*/) const override { return 1; }
  // One item does the work of a batch's samples.
  double ItemCost(uint32_t samples) const override { return samples; }
  void Describe(v1::DatasetInfo& info) const override;
  absl::StatusOr<std::unique_ptr<SourceBatch>> Start(const BatchRequestSpec& request,
                                                     BatchPayload& payload) const override;

 private:
  class Batch;
  const std::shared_ptr<PythonDataset> python_;
};

class PythonSources final : public DatasetSources {
 public:
  explicit PythonSources(std::shared_ptr<PythonDataset> python);

  const PythonDataset& python() const { return *python_; }

  // DatasetSources.
  uint64_t fingerprint() const override { return python_->fingerprint(); }
  size_t num_samples() const override { return python_->size(); }
  const std::string& name() const override { return python_->source(); }
  std::string default_pipeline() const override { return ""; }
  std::shared_ptr<const BatchSource> default_source() const override { return source_; }
  // INVALID_ARGUMENT: a pipeline does not apply.
  absl::StatusOr<std::shared_ptr<const BatchSource>> Make(
      const std::string& pipeline) const override;
  void Describe(v1::DatasetInfo& info) const override;
  void Stop() override { python_->Stop(); }

 private:
  const std::shared_ptr<PythonDataset> python_;
  const std::shared_ptr<const BatchSource> source_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_DATA_PYTHON_PYTHON_SOURCES_H_
