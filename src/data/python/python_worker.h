// PythonWorker: one worker process of a user's own Python dataset (serve
// --python-dataset), started as `PYTHON -m heterodl.dataset_worker` with a
// SOCK_SEQPACKET socket as its descriptor 3 (proto/heterodl/
// python_worker.proto says what goes on it).
//
//   ASSIGN_OR_RETURN(std::unique_ptr<PythonWorker> worker,
//                    PythonWorker::Start(options, &hello));   // hello: its fields
//   absl::StatusOr<WorkerAnswer> answer = worker->Run(task, span, regions, timeout);
//   // !answer.ok(): the worker is lost (died, hung, spoke nonsense): replace it
//   // answer->error.empty(): the sample was written; else the user's error
//
// Not thread-safe: one caller at a time (PythonDataset checks workers out).
#ifndef HETERODL_SRC_DATA_PYTHON_PYTHON_WORKER_H_
#define HETERODL_SRC_DATA_PYTHON_PYTHON_WORKER_H_

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "heterodl/python_worker.pb.h"
#include "src/common/memory/shared_regions.h"
#include "src/common/net/unique_fd.h"
#include "src/common/process/child_process.h"

namespace heterodl {

struct PythonWorkerOptions {
  // The interpreter (a path, or a name looked up in PATH); heterodl must be
  // importable by it (the wheel installed, or PYTHONPATH).
  std::string python = "python3";
  // MODULE:CALLABLE, and folders searched for MODULE first.
  std::string dataset;
  std::vector<std::string> python_path;
  // How long the worker may take to import, construct and describe the
  // dataset before it is given up.
  absl::Duration start_timeout = absl::Minutes(5);
};

// What a worker said of one sample.
struct WorkerAnswer {
  // The user's error; empty when the sample was written.
  std::string error;
  // A written sample's ragged fields: each one's element count, and their
  // bytes one after another (PythonSampleResult).
  std::vector<uint32_t> ragged_lengths;
  std::string ragged_bytes;
};

class PythonWorker {
 public:
  // Starts a worker and waits for its hello. FAILED_PRECONDITION with the
  // Python error when the dataset cannot be imported, made or described;
  // UNAVAILABLE when the worker cannot be started or ends (or passes the
  // start timeout) before it says hello.
  static absl::StatusOr<std::unique_ptr<PythonWorker>> Start(const PythonWorkerOptions& options,
                                                             v1::PythonWorkerHello* hello);
  // Start() in two steps, so that many workers can load at once. The
  // worker dies with the thread that spawns it (it asks Linux for a signal
  // when its parent ends, and the parent is that thread): spawn from one
  // that lives as long as the worker is wanted.
  static absl::StatusOr<std::unique_ptr<PythonWorker>> Spawn(const PythonWorkerOptions& options);
  absl::Status AwaitHello(const PythonWorkerOptions& options, v1::PythonWorkerHello* hello);
  ~PythonWorker();  // kills and reaps the process
  PythonWorker(const PythonWorker&) = delete;
  PythonWorker& operator=(const PythonWorker&) = delete;

  // Has the worker make one sample into `span`'s region (the region's memfd
  // goes along the first time), telling it first which regions it mapped
  // that `regions` has freed. Its answer; UNAVAILABLE when the worker died,
  // DEADLINE_EXCEEDED when it did not answer (all of it) within `timeout`,
  // INTERNAL when its answer is not one: in each case the worker is of no
  // further use.
  absl::StatusOr<WorkerAnswer> Run(v1::PythonSampleTask task, const SharedSpan& span,
                                   const SharedRegions& regions, absl::Duration timeout);

  // For a dataset with a collate_fn: has the worker make the samples of
  // `task.batch` and collate them, keeping the batch until WriteBatch (or
  // any other task, which drops it). Errors as Run's.
  absl::StatusOr<v1::PythonBatchMade> MakeBatch(v1::PythonSampleTask task,
                                                const SharedRegions& regions,
                                                absl::Duration timeout);
  // Has the worker write the batch MakeBatch made, collated field i at
  // `task.offsets[i]` of `span`'s region: its error (empty when written).
  // Errors as Run's.
  absl::StatusOr<std::string> WriteBatch(v1::PythonSampleTask task, const SharedSpan& span,
                                         const SharedRegions& regions, absl::Duration timeout);

  pid_t pid() const { return process_.pid(); }
  // "exit code N" / "killed by signal N" once the process ended (it is
  // reaped here, waiting up to a second), else "still running".
  std::string Ending();

 private:
  PythonWorker(ChildProcess process, UniqueFd socket)
      : process_(std::move(process)), socket_(std::move(socket)) {}
  // Sends `task`, telling the worker first which regions it mapped that
  // `regions` has freed, and naming `span`'s region (its memfd attached the
  // first time), when there is one.
  absl::Status Send(v1::PythonSampleTask task, const SharedSpan* span,
                    const SharedRegions& regions);
  // One record from the worker, by `deadline` (`allowed` after the
  // exchange began: what the error says).
  absl::StatusOr<std::string> Receive(absl::Time deadline, absl::Duration allowed);

  ChildProcess process_;
  UniqueFd socket_;
  // The regions whose memfd the worker has been sent (and maps).
  std::set<uint64_t> mapped_;
  // Room for the largest record a worker may send.
  std::vector<char> receive_buffer_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_DATA_PYTHON_PYTHON_WORKER_H_
