#include "src/data/python/python_worker.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/json_util.h"
#include "src/common/net/unix_socket.h"
#include "src/common/status_macros.h"

namespace heterodl {
namespace {

// A hello names every field and the structure: far below this.
constexpr size_t kMaxRecordBytes = 1 << 20;
// A sample's ragged fields hold at most this many bytes (kMaxRaggedLength
// elements of 4 KiB each): more is a worker speaking nonsense.
constexpr uint64_t kMaxRaggedBytes = uint64_t{1} << 28;

absl::Status ParseJson(const std::string& json, google::protobuf::Message* message) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  if (const auto parsed = google::protobuf::util::JsonStringToMessage(json, message, options);
      !parsed.ok()) {
    return absl::InternalError(
        absl::StrCat("the worker's message is not a ", message->GetDescriptor()->name(), ": ",
                     parsed.message().as_string(), ": ", json.substr(0, 200)));
  }
  return absl::OkStatus();
}

std::string ToWireJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PythonWorker>> PythonWorker::Start(
    const PythonWorkerOptions& options, v1::PythonWorkerHello* hello) {
  ASSIGN_OR_RETURN(std::unique_ptr<PythonWorker> worker, Spawn(options));
  RETURN_IF_ERROR(worker->AwaitHello(options, hello));
  return worker;
}

absl::StatusOr<std::unique_ptr<PythonWorker>> PythonWorker::Spawn(
    const PythonWorkerOptions& options) {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    return absl::InternalError(absl::StrCat("socketpair: ", std::strerror(errno)));
  }
  UniqueFd ours(pair[0]);
  UniqueFd theirs(pair[1]);
  std::vector<std::string> argv = {options.python,
                                   "-m",
                                   "heterodl.dataset_worker",
                                   "--fd",
                                   absl::StrCat(ChildProcess::kPassedFd),
                                   "--dataset",
                                   options.dataset};
  for (const std::string& folder : options.python_path) {
    argv.push_back("--python-path");
    argv.push_back(folder);
  }
  absl::StatusOr<ChildProcess> process = ChildProcess::Spawn(argv, {.pass_fd = theirs.get()});
  if (!process.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot start the Python worker (--python ",
                                               options.python, "): ", process.status().message()));
  }
  theirs.reset();  // the worker's end lives in the worker alone: its death ends ours
  return std::unique_ptr<PythonWorker>(new PythonWorker(std::move(*process), std::move(ours)));
}

absl::Status PythonWorker::AwaitHello(const PythonWorkerOptions& options,
                                      v1::PythonWorkerHello* hello) {
  absl::StatusOr<std::string> record =
      Receive(absl::Now() + options.start_timeout, options.start_timeout);
  if (!record.ok()) {
    const std::string ending = Ending();
    return absl::UnavailableError(
        absl::StrCat("the Python worker (", options.python,
                     " -m heterodl.dataset_worker) ended before it "
                     "loaded ",
                     options.dataset, " (", ending, "; ", record.status().message(),
                     "): is heterodl installed for that interpreter? Its error is above"));
  }
  RETURN_IF_ERROR(ParseJson(*record, hello));
  if (!hello->load_error().empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--python-dataset ", options.dataset, ": ", hello->load_error()));
  }
  return absl::OkStatus();
}

PythonWorker::~PythonWorker() {
  socket_.reset();  // the worker sees the end and exits; the kill is for a hung one
}

absl::StatusOr<std::string> PythonWorker::Receive(absl::Time deadline, absl::Duration allowed) {
  while (true) {
    pollfd ready{socket_.get(), POLLIN, 0};
    const int64_t left_ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
    const int polled = poll(&ready, 1, static_cast<int>(std::min<int64_t>(left_ms, 1 << 30)));
    if (polled < 0 && errno == EINTR) {
      continue;
    }
    if (polled == 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("no answer within ", absl::FormatDuration(allowed)));
    }
    if (receive_buffer_.empty()) {
      receive_buffer_.resize(kMaxRecordBytes);  // once: most records are tens of bytes
    }
    const ssize_t got =
        recv(socket_.get(), receive_buffer_.data(), receive_buffer_.size(), MSG_TRUNC);
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got <= 0) {
      return absl::UnavailableError(got == 0 ? "its socket closed"
                                             : absl::StrCat("recv: ", std::strerror(errno)));
    }
    if (static_cast<size_t>(got) > receive_buffer_.size()) {
      return absl::InternalError(absl::StrCat("a record of ", got, " bytes from the worker"));
    }
    return std::string(receive_buffer_.data(), static_cast<size_t>(got));
  }
}

absl::Status PythonWorker::Send(v1::PythonSampleTask task, const SharedSpan* span,
                                const SharedRegions& regions) {
  for (auto it = mapped_.begin(); it != mapped_.end();) {
    if (regions.IsLive(*it)) {
      ++it;
    } else {
      task.add_forget(*it);
      it = mapped_.erase(it);
    }
  }
  const bool attach = span != nullptr && mapped_.count(span->region) == 0;
  if (span != nullptr) {
    task.set_region(span->region);
  }
  const std::string json = ToWireJson(task);
  const ssize_t sent =
      attach ? SendWithDescriptor(socket_.get(), json.data(), json.size(), span->fd)
             : send(socket_.get(), json.data(), json.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (sent != static_cast<ssize_t>(json.size())) {
    return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
  }
  if (attach) {
    mapped_.insert(span->region);
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::PythonBatchMade> PythonWorker::MakeBatch(v1::PythonSampleTask task,
                                                            const SharedRegions& regions,
                                                            absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  RETURN_IF_ERROR(Send(std::move(task), nullptr, regions));
  ASSIGN_OR_RETURN(const std::string record, Receive(deadline, timeout));
  v1::PythonBatchMade made;
  RETURN_IF_ERROR(ParseJson(record, &made));
  return made;
}

absl::StatusOr<std::string> PythonWorker::WriteBatch(v1::PythonSampleTask task,
                                                     const SharedSpan& span,
                                                     const SharedRegions& regions,
                                                     absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  task.set_write_batch(true);
  RETURN_IF_ERROR(Send(std::move(task), &span, regions));
  ASSIGN_OR_RETURN(const std::string record, Receive(deadline, timeout));
  v1::PythonSampleResult result;
  RETURN_IF_ERROR(ParseJson(record, &result));
  return result.error();
}

absl::StatusOr<WorkerAnswer> PythonWorker::Run(v1::PythonSampleTask task, const SharedSpan& span,
                                               const SharedRegions& regions,
                                               absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  RETURN_IF_ERROR(Send(std::move(task), &span, regions));
  ASSIGN_OR_RETURN(const std::string record, Receive(deadline, timeout));
  v1::PythonSampleResult result;
  RETURN_IF_ERROR(ParseJson(record, &result));
  WorkerAnswer answer;
  answer.error = result.error();
  answer.ragged_lengths.assign(result.ragged_lengths().begin(), result.ragged_lengths().end());
  if (result.ragged_bytes() > kMaxRaggedBytes) {
    return absl::InternalError(
        absl::StrCat("a sample of ", result.ragged_bytes(), " bytes in its ragged fields"));
  }
  answer.ragged_bytes.reserve(result.ragged_bytes());
  while (answer.ragged_bytes.size() < result.ragged_bytes()) {
    ASSIGN_OR_RETURN(const std::string part, Receive(deadline, timeout));
    if (answer.ragged_bytes.size() + part.size() > result.ragged_bytes()) {
      return absl::InternalError("more ragged bytes than the worker announced");
    }
    answer.ragged_bytes += part;
  }
  return answer;
}

std::string PythonWorker::Ending() {
  std::optional<int> code = process_.WaitFor(absl::Seconds(1));
  if (!code) {
    return "still running";
  }
  return *code > 128 ? absl::StrCat("killed by signal ", *code - 128)
                     : absl::StrCat("exit code ", *code);
}

}  // namespace heterodl
