// The `heterodl` Python module: RemoteLoader (src/client) for PyTorch
// trainers. Batches become torch tensors without a copy: the tensors borrow
// the received buffers and keep them alive.
#include <torch/cuda.h>
#include <torch/extension.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/client/remote_loader.h"
#include "src/client/shutdown.h"
#include "src/common/log.h"
#include "src/train/pinned_memory.h"
#include "src/wire/grpc_lifetime.h"
#include "src/wire/grpc_logging.h"

namespace heterodl {
namespace {

namespace py = pybind11;

// A received batch as tensors. The pixel tensor views the batch's own
// buffer; the shared Batch is freed when the last tensor using it is.
struct PyBatch {
  torch::Tensor images;   // uint8 [B, H, W, C]
  torch::Tensor labels;   // int64 [B]
  torch::Tensor indices;  // int64 [B]
  int failed = 0;
  uint32_t epoch = 0;
  int64_t index = 0;
};

// A tensor over `data`, owned by `owner`: the deleter's captured copy keeps
// the batch alive until the tensor's storage is freed.
torch::Tensor Borrow(const std::shared_ptr<Batch>& owner, void* data, at::IntArrayRef shape,
                     torch::Dtype dtype) {
  return torch::from_blob(
      data, shape, [owner](void*) {}, torch::TensorOptions(dtype));
}

PyBatch ToPython(Batch&& received) {
  auto batch = std::make_shared<Batch>(std::move(received));
  PyBatch result;
  result.images =
      Borrow(batch, batch->images.data(),
             {batch->size(), batch->height, batch->width, batch->channels}, torch::kUInt8);
  result.labels = Borrow(batch, batch->labels.data(), {batch->size()}, torch::kInt64);
  result.indices = Borrow(batch, batch->indices.data(), {batch->size()}, torch::kInt64);
  result.failed = batch->failed;
  result.epoch = batch->epoch;
  result.index = batch->index;
  return result;
}

// A failed status as the Python exception a Python user expects:
// ValueError for a bad argument (a pipeline the servers cannot parse
// included), TimeoutError when nothing came in time, ConnectionError when
// servers cannot be reached, PermissionError for a refused token or
// certificate, and a pending KeyboardInterrupt when a signal ended the wait.
[[noreturn]] void Raise(const absl::Status& status) {
  if (PyErr_Occurred() != nullptr) throw py::error_already_set();
  const std::string message(status.message());
  PyObject* type = PyExc_RuntimeError;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      type = PyExc_ValueError;
      break;
    case absl::StatusCode::kDeadlineExceeded:
      type = PyExc_TimeoutError;
      break;
    case absl::StatusCode::kUnavailable:
      type = PyExc_ConnectionError;
      break;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      type = PyExc_PermissionError;
      break;
    default:
      break;
  }
  PyErr_SetString(type, message.c_str());
  throw py::error_already_set();
}

// Runs Python's signal handlers from a wait in C++ (called without the GIL):
// true when one raised (Ctrl-C's KeyboardInterrupt), which stays pending for
// Raise() to throw.
bool PythonSignalRaised() {
  py::gil_scoped_acquire gil;
  return PyErr_CheckSignals() != 0;
}

// Python's view of a RemoteLoader: `for batch in loader` runs the epoch set
// by set_epoch(), from its start (or from `resume(epoch, batch)`).
class PyRemoteDataLoader {
 public:
  PyRemoteDataLoader(std::vector<std::string> servers, uint32_t batch_size, std::string pipeline,
                     uint32_t rank, uint32_t world_size, uint64_t seed, bool drop_last, bool shuffle,
                     double max_buffered_mb, int connections_per_server, double connect_timeout,
                     double stall_timeout, std::optional<std::string> auth_token,
                     std::optional<bool> pin_memory, std::string tls_ca, std::string tls_cert,
                     std::string tls_key, std::string tls_server_name, bool pixel_channel) {
    RemoteLoaderOptions options;
    options.servers = std::move(servers);
    options.batch_size = batch_size;
    options.pipeline = std::move(pipeline);
    options.rank = rank;
    options.world_size = world_size;
    options.seed = seed;
    options.drop_last = drop_last;
    options.shuffle = shuffle;
    if (!(max_buffered_mb > 0)) throw py::value_error("max_buffered_mb must be > 0");
    options.max_buffered_bytes = static_cast<uint64_t>(max_buffered_mb * (1 << 20));
    options.connections_per_server = connections_per_server;
    options.auth_token = auth_token.value_or("");
    options.connect_timeout = absl::Seconds(connect_timeout);
    options.stall_timeout = absl::Seconds(stall_timeout);
    options.tls.ca_file = std::move(tls_ca);
    options.tls.cert_file = std::move(tls_cert);
    options.tls.key_file = std::move(tls_key);
    options.tls.server_name = std::move(tls_server_name);
    options.pixel_channel = pixel_channel;
    options.interrupt_connect = PythonSignalRaised;
    options.interrupt_next = PythonSignalRaised;
    if (pin_memory.value_or(torch::cuda::is_available())) {
      if (!torch::cuda::is_available()) {
        throw py::value_error("pin_memory=True needs CUDA, and torch sees no CUDA device");
      }
      options.pixel_allocator = PinnedHostAllocator();
    }
    absl::StatusOr<std::unique_ptr<RemoteLoader>> loader;
    {
      py::gil_scoped_release release;  // waits for servers
      loader = RemoteLoader::Connect(options);
    }
    if (!loader.ok()) Raise(loader.status());
    loader_ = std::move(*loader);
  }

  // Both also move the loader at once, so it fetches the epoch's first
  // batches while the caller does whatever comes before iterating.
  void SetEpoch(uint32_t epoch) { Resume(epoch, 0); }

  void Resume(uint32_t epoch, int64_t next_batch) {
    epoch_ = epoch;
    start_batch_ = next_batch;
    absl::Status status = loader_->SetEpoch(epoch_, start_batch_);
    if (!status.ok()) Raise(status);
  }

  py::dict Stats() const {
    const LoaderStats stats = loader_->stats();
    py::dict result;
    result["requested"] = stats.requested;
    result["received"] = stats.received;
    result["delivered"] = stats.delivered;
    result["dropped"] = stats.dropped;
    result["reassigned"] = stats.reassigned;
    result["window"] = stats.window;
    result["depths"] = stats.depths;
    return result;
  }

  int64_t Length() const { return loader_->size(); }

  PyRemoteDataLoader& Iterate() {
    absl::Status status = loader_->SetEpoch(epoch_, start_batch_);
    if (!status.ok()) Raise(status);
    start_batch_ = 0;  // a later iteration starts the epoch over
    return *this;
  }

  PyBatch Next() {
    absl::StatusOr<std::optional<Batch>> batch;
    {
      py::gil_scoped_release release;  // the trainer's other threads go on
      batch = loader_->Next();
    }
    if (!batch.ok()) Raise(batch.status());
    if (!batch->has_value()) throw py::stop_iteration();
    return ToPython(std::move(**batch));
  }

  py::tuple Position() const {
    const LoaderPosition position = loader_->position();
    return py::make_tuple(position.epoch, position.next_batch);
  }

  py::list ClassNames() const {
    py::list names;
    for (const std::string& name : loader_->dataset().class_names) names.append(name);
    return names;
  }

  uint64_t NumSamples() const { return loader_->dataset().num_samples; }

 private:
  std::unique_ptr<RemoteLoader> loader_;
  uint32_t epoch_ = 0;
  int64_t start_batch_ = 0;
};

}  // namespace
}  // namespace heterodl

PYBIND11_MODULE(_heterodl, m) {
  namespace py = pybind11;
  using heterodl::PyBatch;
  using heterodl::PyRemoteDataLoader;
  m.doc() = "heterodl remote data loader (see heterodl/__init__.py)";
  // A loader destroyed as the interpreter exits must not wait on gRPC's own
  // shutdown.
  heterodl::KeepGrpcUntilExit();
  heterodl::RouteGrpcLogsToOurs();

  m.attr("__version__") = HETERODL_VERSION;
  m.def(
      "_shutdown_servers",
      [](std::vector<std::string> servers, std::string reason, double timeout,
         std::optional<std::string> auth_token, std::string tls_ca, std::string tls_cert,
         std::string tls_key, std::string tls_server_name) {
        heterodl::TlsConfig tls;
        tls.ca_file = std::move(tls_ca);
        tls.cert_file = std::move(tls_cert);
        tls.key_file = std::move(tls_key);
        tls.server_name = std::move(tls_server_name);
        absl::Status status;
        {
          py::gil_scoped_release release;
          status = heterodl::ShutdownDataServers(servers, reason, absl::Seconds(timeout),
                                                 auth_token.value_or(""), tls);
        }
        if (!status.ok()) heterodl::Raise(status);
      },
      py::arg("servers"), py::arg("reason"), py::arg("timeout"), py::arg("auth_token"),
      py::arg("tls_ca"), py::arg("tls_cert"), py::arg("tls_key"), py::arg("tls_server_name"));
  m.def(
      "_set_log_level",
      [](const std::string& name) {
        const std::optional<heterodl::LogLevel> level = heterodl::ParseLogLevel(name);
        if (!level) throw py::value_error("log level must be debug, info, warning or error");
        heterodl::SetMinLogLevel(*level);
      },
      py::arg("level"));

  py::class_<PyBatch>(m, "Batch", "One batch: uint8 NHWC images, int64 labels and indices.")
      .def_readonly("images", &PyBatch::images, "torch.uint8 [B, H, W, 3], RGB")
      .def_readonly("labels", &PyBatch::labels, "torch.int64 [B]")
      .def_readonly("indices", &PyBatch::indices, "torch.int64 [B]: planned dataset indices")
      .def_readonly("failed", &PyBatch::failed,
                    "slots filled by a replacement because their sample was unreadable")
      .def_readonly("epoch", &PyBatch::epoch)
      .def_readonly("index", &PyBatch::index, "position of the batch in its rank's epoch")
      .def("__len__", [](const PyBatch& batch) { return batch.labels.size(0); });

  py::class_<PyRemoteDataLoader>(m, "RemoteDataLoader",
                                 "Batches of one rank from heterodl data servers, in order.")
      .def(py::init<std::vector<std::string>, uint32_t, std::string, uint32_t, uint32_t, uint64_t,
                    bool, bool, double, int, double, double, std::optional<std::string>,
                    std::optional<bool>, std::string, std::string, std::string, std::string,
                    bool>(),
           py::arg("servers"), py::arg("batch_size"), py::arg("pipeline") = "", py::arg("rank") = 0,
           py::arg("world_size") = 1, py::arg("seed") = 0, py::arg("drop_last") = false,
           py::arg("shuffle") = true, py::arg("max_buffered_mb") = 1024.0,
           py::arg("connections_per_server") = 2,
           py::arg("connect_timeout") = 60.0, py::arg("stall_timeout") = 60.0,
           py::arg("auth_token") = py::none(), py::arg("pin_memory") = py::none(),
           py::arg("tls_ca") = "", py::arg("tls_cert") = "", py::arg("tls_key") = "",
           py::arg("tls_server_name") = "", py::arg("pixel_channel") = true)
      .def("set_epoch", &PyRemoteDataLoader::SetEpoch, py::arg("epoch"),
           "The epoch the next iteration runs (it changes the shuffle).")
      .def("resume", &PyRemoteDataLoader::Resume, py::arg("epoch"), py::arg("next_batch"),
           "The next iteration starts at batch `next_batch` of `epoch` (from a checkpoint).")
      .def("position", &PyRemoteDataLoader::Position,
           "(epoch, next batch): what to save in a checkpoint and pass to resume()")
      .def("stats", &PyRemoteDataLoader::Stats,
           "what the loader did: batches requested, received, delivered, dropped (fetched "
           "ahead, then not wanted), reassigned (after a server failed); its window and "
           "per-connection depths")
      .def("__len__", &PyRemoteDataLoader::Length)
      .def("__iter__", &PyRemoteDataLoader::Iterate, py::return_value_policy::reference_internal)
      .def("__next__", &PyRemoteDataLoader::Next)
      .def_property_readonly("class_names", &PyRemoteDataLoader::ClassNames)
      .def_property_readonly("num_samples", &PyRemoteDataLoader::NumSamples);
}
