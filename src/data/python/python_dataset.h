// PythonDataset: a user's own map-style PyTorch Dataset (serve
// --python-dataset MODULE:CALLABLE), run by worker processes (PythonWorker)
// and collated into batches as default_collate does: the fields of its
// first sample, each sample's leaves written by a worker straight into the
// batch's shared memory.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<PythonDataset> dataset,
//                    PythonDataset::Start(options, regions));
//   dataset->fields();   // DatasetInfo.fields, e.g. field_0 uint8 [H, W, 3]
//   SlotResult slot = dataset->BuildSlot(seed, epoch, indices, i, payload, layout);
//   // or, when its module has a collate_fn, a whole batch at a time:
//   ASSIGN_OR_RETURN(CollatedBatch batch,
//                    dataset->BuildBatch(seed, epoch, indices, max_bytes, allocate));
//
// The guarantees of the native path hold: a sample is a pure function of
// (seed, epoch, index) (the worker seeds Python's, NumPy's and torch's
// generators from it), so any server builds the same batch. A sample whose
// __getitem__ raises, or that does not match the first sample's fields, is
// replaced as a native sample that cannot be decoded is; the error is
// logged once per distinct message, with a count as it recurs. A worker
// that dies or hangs (past `sample_timeout`) is replaced, and its sample
// tried once more on the new one before it counts as failed.
#ifndef HETERODL_SRC_DATA_PYTHON_PYTHON_DATASET_H_
#define HETERODL_SRC_DATA_PYTHON_PYTHON_DATASET_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "heterodl/data_service.pb.h"
#include "src/common/memory/shared_regions.h"
#include "src/data/batch_assembler.h"
#include "src/data/python/python_worker.h"
#include "src/wire/batch_layout.h"

namespace heterodl {

struct PythonDatasetOptions {
  PythonWorkerOptions worker;
  // Worker processes: samples made at once. 0: one per core.
  int workers = 0;
  // A worker that takes longer than this over one sample is replaced.
  absl::Duration sample_timeout = absl::Minutes(5);
};

class PythonDataset {
 public:
  // Starts the workers (in parallel) and checks that they agree on the
  // dataset. FAILED_PRECONDITION with the Python error when the dataset
  // cannot be imported, made or described, or when `regions` cannot give
  // shared memory (memfds refused); UNAVAILABLE when a worker cannot start.
  static absl::StatusOr<std::unique_ptr<PythonDataset>> Start(
      const PythonDatasetOptions& options, std::shared_ptr<SharedRegions> regions);
  ~PythonDataset();

  size_t size() const { return num_samples_; }
  // Of the spec, the number of samples, the fields and the structure: two
  // servers of the same dataset code agree, and a change of either shows.
  uint64_t fingerprint() const { return fingerprint_; }
  const std::string& source() const { return options_.worker.dataset; }
  const google::protobuf::RepeatedPtrField<v1::FieldSpec>& fields() const { return fields_; }
  const v1::SampleNode& structure() const { return structure_; }
  // The dataset's `classes`, when it has them (ImageFolder's); else empty.
  const google::protobuf::RepeatedPtrField<std::string>& class_names() const {
    return class_names_;
  }
  int workers() const { return static_cast<int>(options_.workers); }
  // Samples are (image uint8 [H, W, 3], int64 label): IsLabelledImages.
  // BuildSlot then also returns each sample's label.
  bool labelled_images() const { return labelled_images_; }
  // Some fields are ragged (the dataset's ragged_fields): a SlotResult
  // carries their elements.
  bool has_ragged_fields() const { return !ragged_element_bytes_.empty(); }
  // The dataset's module has a collate_fn: every field is collated (the
  // batch's own array) and batches are made by BuildBatch, not BuildSlot.
  bool collates() const { return collates_; }

  // Makes sample `indices[slot]` into row `slot` of every dense field of
  // `layout` in `payload` (memory of the regions given to Start), blocking
  // the calling thread until a worker has; its ragged fields come back in
  // the result, for the batch to place once all its samples are made. A
  // failed sample is replaced by one picked from (seed, epoch, index) as
  // BatchAssembler does, or zeroed.
  SlotResult BuildSlot(uint64_t seed, uint32_t epoch, absl::Span<const int64_t> indices,
                       size_t slot, uint8_t* payload, const BatchLayout& layout)
      ABSL_LOCKS_EXCLUDED(mu_);

  // A collated batch: what BuildBatch made, where.
  struct CollatedBatch {
    // One per index: kZeroFilled for a sample that could not be made (nor
    // a replacement) and was left out of the collation.
    std::vector<SlotResult> slots;
    // Batch.collated_shapes.
    google::protobuf::RepeatedPtrField<v1::FieldShape> shapes;
  };
  // Shared memory (of the regions given to Start) for a collated batch of
  // this layout: where its payload starts.
  using BatchAllocator = std::function<absl::StatusOr<uint8_t*>(const BatchLayout&)>;

  // For a dataset that collates: has one worker make the samples of
  // `indices` (a failed one replaced as BuildSlot replaces it, or left out)
  // and collate them, asks `allocate` for the memory of the result (at most
  // `max_bytes`) and has the worker write it there, blocking the calling
  // thread until it has. A batch that cannot be collated (collate_fn
  // raised or returned other fields, two workers in turn were lost, it
  // passes `max_bytes`) is logged as a failed sample is, and made
  // empty: every slot kZeroFilled, every dimension 0 (`allocate` is called
  // again, for no bytes). CANCELLED when the server stops; `allocate`'s
  // own error.
  absl::StatusOr<CollatedBatch> BuildBatch(uint64_t seed, uint32_t epoch,
                                           absl::Span<const int64_t> indices, uint64_t max_bytes,
                                           const BatchAllocator& allocate) ABSL_LOCKS_EXCLUDED(mu_);

  // Kills the workers making samples now (a hung one would hold its thread
  // until the sample timeout) and starts no more: BuildSlot then returns
  // at once. For a server that is stopping; the destructor calls it.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // Workers that died or hung and were replaced, so far.
  int64_t workers_replaced() const { return workers_replaced_.load(); }

 private:
  PythonDataset(PythonDatasetOptions options, std::shared_ptr<SharedRegions> regions)
      : options_(std::move(options)), regions_(std::move(regions)) {}

  // Makes one sample with a worker, its ragged fields into `result`; the
  // user's or the worker's error.
  absl::Status MakeSample(uint64_t seed, uint32_t epoch, int64_t index, size_t slot,
                          uint8_t* payload, const BatchLayout& layout, SlotResult& result)
      ABSL_LOCKS_EXCLUDED(mu_);
  // One worker's attempt at the collated batch of `task`: the batch,
  // written. INVALID_ARGUMENT when it cannot be collated (the user's code,
  // or its size), logged; UNAVAILABLE when the worker was lost or none
  // could be had; CANCELLED when the server stops; `allocate`'s error.
  absl::StatusOr<CollatedBatch> TryBatch(const v1::PythonSampleTask& task,
                                         absl::Span<const int64_t> indices, uint64_t max_bytes,
                                         const BatchAllocator& allocate) ABSL_LOCKS_EXCLUDED(mu_);
  // INTERNAL unless `answer`'s ragged fields are as many as the dataset's,
  // each at most kMaxRaggedLength elements, and their bytes add up.
  absl::Status CheckRagged(const WorkerAnswer& answer) const;
  // A worker to use, waiting for one to be free. One lost before is
  // started again here, on the calling thread (it dies with that thread: a
  // pool thread, which lives as long as the service); UNAVAILABLE when it
  // cannot be.
  absl::StatusOr<std::unique_ptr<PythonWorker>> CheckOut() ABSL_LOCKS_EXCLUDED(mu_);
  void CheckIn(std::unique_ptr<PythonWorker> worker) ABSL_LOCKS_EXCLUDED(mu_);
  // A checked-out worker that died or hung: killed, reaped, and its place
  // left to be started again.
  void Lose(std::unique_ptr<PythonWorker> worker) ABSL_LOCKS_EXCLUDED(mu_);
  bool IdleOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool stopping() ABSL_LOCKS_EXCLUDED(mu_);
  // Logs `error` the first time, then when its count reaches 10, 100, ...
  void NoteError(const std::string& error) ABSL_LOCKS_EXCLUDED(mu_);

  const PythonDatasetOptions options_;
  const std::shared_ptr<SharedRegions> regions_;
  size_t num_samples_ = 0;
  uint64_t fingerprint_ = 0;
  google::protobuf::RepeatedPtrField<v1::FieldSpec> fields_;
  v1::SampleNode structure_;
  google::protobuf::RepeatedPtrField<std::string> class_names_;
  bool labelled_images_ = false;
  bool collates_ = false;
  // Bytes of one element of each ragged field, in order.
  std::vector<uint64_t> ragged_element_bytes_;

  absl::Mutex mu_;
  // Free workers; `out_` are in use. A slot whose worker could not be
  // restarted is a null entry, started again when next checked out.
  std::vector<std::unique_ptr<PythonWorker>> idle_ ABSL_GUARDED_BY(mu_);
  // The processes of the workers checked out.
  std::set<pid_t> busy_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, int64_t> error_counts_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> workers_replaced_{0};
};

}  // namespace heterodl

#endif  // HETERODL_SRC_DATA_PYTHON_PYTHON_DATASET_H_
