#include "src/python/python_loader.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "src/client/remote_loader.h"
#include "src/common/fingerprint.h"
#include "src/common/memory/cuda_host_allocator.h"
#include "src/python/loader_metrics.h"
#include "src/python/python_array.h"
#include "src/python/python_errors.h"

namespace heterodl {
namespace {

struct LoaderObject {
  PyObject_HEAD RemoteLoader* loader;
  LoaderMetrics* metrics;  // null unless metrics_port was given
};

RemoteLoader& Loader(PyObject* self) { return *reinterpret_cast<LoaderObject*>(self)->loader; }
LoaderMetrics* Metrics(PyObject* self) { return reinterpret_cast<LoaderObject*>(self)->metrics; }

// The server list, a Python list of str.
bool ParseServers(PyObject* list, std::vector<std::string>& servers) {
  if (!PyList_Check(list)) {
    PyErr_SetString(PyExc_TypeError, "servers must be a list of 'host:port' strings");
    return false;
  }
  for (Py_ssize_t i = 0; i < PyList_Size(list); ++i) {
    Py_ssize_t size = 0;
    const char* text = PyUnicode_AsUTF8AndSize(PyList_GetItem(list, i), &size);
    if (text == nullptr) {
      return false;
    }
    servers.emplace_back(text, static_cast<size_t>(size));
  }
  return true;
}

PyObject* New(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"servers",         "batch_size",
                                   "pipeline",        "rank",
                                   "world_size",      "seed",
                                   "drop_last",       "shuffle",
                                   "max_buffered_mb", "connections_per_server",
                                   "connect_timeout", "stall_timeout",
                                   "auth_token",      "pin_memory",
                                   "tls_ca",          "tls_cert",
                                   "tls_key",         "tls_server_name",
                                   "pixel_channel",   "pin_device",
                                   "servers_file",    "servers_dns",
                                   "metrics_port",    nullptr};
  PyObject* servers = nullptr;
  unsigned int batch_size = 0, rank = 0, world_size = 1;
  unsigned long long seed = 0;
  const char* pipeline = "";
  const char* auth_token = nullptr;
  const char *tls_ca = "", *tls_cert = "", *tls_key = "", *tls_server_name = "";
  const char *servers_file = "", *servers_dns = "";
  int drop_last = 0, shuffle = 1, pin_memory = 0, pixel_channel = 1, pin_device = 0;
  int connections_per_server = 2, metrics_port = -1;
  double max_buffered_mb = 1024, connect_timeout = 60, stall_timeout = 60;
  if (!PyArg_ParseTupleAndKeywords(
          args, kwargs, "OIsIIKppdiddzpssssp|issi", const_cast<char**>(keywords), &servers,
          &batch_size, &pipeline, &rank, &world_size, &seed, &drop_last, &shuffle, &max_buffered_mb,
          &connections_per_server, &connect_timeout, &stall_timeout, &auth_token, &pin_memory,
          &tls_ca, &tls_cert, &tls_key, &tls_server_name, &pixel_channel, &pin_device,
          &servers_file, &servers_dns, &metrics_port)) {
    return nullptr;
  }
  RemoteLoaderOptions options;
  if (!ParseServers(servers, options.servers.fixed)) {
    return nullptr;
  }
  options.servers.servers_file = servers_file;
  options.servers.dns_name = servers_dns;
  options.batch_size = batch_size;
  options.pipeline = pipeline;
  options.rank = rank;
  options.world_size = world_size;
  options.seed = seed;
  options.drop_last = drop_last != 0;
  options.shuffle = shuffle != 0;
  options.max_buffered_bytes = static_cast<uint64_t>(max_buffered_mb * (1 << 20));
  options.connections_per_server = connections_per_server;
  options.connect_timeout = absl::Seconds(connect_timeout);
  options.stall_timeout = absl::Seconds(stall_timeout);
  options.auth_token = auth_token != nullptr ? auth_token : "";
  options.tls.ca_file = tls_ca;
  options.tls.cert_file = tls_cert;
  options.tls.key_file = tls_key;
  options.tls.server_name = tls_server_name;
  options.pixel_channel = pixel_channel != 0;
  options.interrupt_connect = PythonSignalRaised;
  options.interrupt_next = PythonSignalRaised;
  if (pin_memory != 0) {
    absl::StatusOr<HostAllocator> pinned = CudaHostAllocator(pin_device);
    if (!pinned.ok()) {
      PyErr_SetString(PyExc_ValueError,
                      ("pin_memory=True: " + std::string(pinned.status().message())).c_str());
      return nullptr;
    }
    options.pixel_allocator = *std::move(pinned);
  }

  absl::StatusOr<std::unique_ptr<RemoteLoader>> loader;
  Py_BEGIN_ALLOW_THREADS  // waits for servers
      loader = RemoteLoader::Connect(options);
  Py_END_ALLOW_THREADS if (!loader.ok()) { return RaiseStatus(loader.status()); }
  std::unique_ptr<LoaderMetrics> metrics;
  if (metrics_port >= 0) {
    absl::StatusOr<std::unique_ptr<LoaderMetrics>> started =
        LoaderMetrics::Start(metrics_port, options);
    if (!started.ok()) {
      Py_BEGIN_ALLOW_THREADS  // closing streams joins the loader's threads
          loader->reset();
      Py_END_ALLOW_THREADS return RaiseStatus(started.status());
    }
    metrics = *std::move(started);
  }

  PyObject* self = AllocateInstance(type);
  if (self == nullptr) {
    return nullptr;
  }
  reinterpret_cast<LoaderObject*>(self)->loader = loader->release();
  reinterpret_cast<LoaderObject*>(self)->metrics = metrics.release();
  return self;
}

void Dealloc(PyObject* self) {
  RemoteLoader* loader = reinterpret_cast<LoaderObject*>(self)->loader;
  LoaderMetrics* metrics = Metrics(self);
  Py_BEGIN_ALLOW_THREADS  // closing streams and the endpoint joins their threads
      delete metrics;
  delete loader;
  Py_END_ALLOW_THREADS FreeInstance(self);
}

PyObject* SetEpoch(PyObject* self, PyObject* args) {
  unsigned int epoch = 0;
  long long next_batch = 0;
  if (!PyArg_ParseTuple(args, "I|L", &epoch, &next_batch)) {
    return nullptr;
  }
  const absl::Status status = Loader(self).SetEpoch(epoch, next_batch);
  if (!status.ok()) {
    return RaiseStatus(status);
  }
  if (LoaderMetrics* metrics = Metrics(self)) {
    metrics->IterationStarted();
  }
  Py_RETURN_NONE;
}

// {name: (length, ...)} of the batch's ragged fields: how many elements
// each sample has.
PyObject* RaggedLengths(const Batch& batch) {
  PyObject* lengths = PyDict_New();
  if (lengths == nullptr) {
    return nullptr;
  }
  for (const FieldSlice& field : batch.fields) {
    if (!field.ragged) {
      continue;
    }
    PyObject* counts = PyTuple_New(static_cast<Py_ssize_t>(field.lengths.size()));
    if (counts == nullptr) {
      Py_DECREF(lengths);
      return nullptr;
    }
    for (size_t i = 0; i < field.lengths.size(); ++i) {
      PyObject* count = PyLong_FromUnsignedLong(field.lengths[i]);
      if (count == nullptr) {
        Py_DECREF(counts);
        Py_DECREF(lengths);
        return nullptr;
      }
      PyTuple_SetItem(counts, static_cast<Py_ssize_t>(i), count);  // steals
    }
    const int set = PyDict_SetItemString(lengths, field.name.c_str(), counts);
    Py_DECREF(counts);
    if (set != 0) {
      Py_DECREF(lengths);
      return nullptr;
    }
  }
  return lengths;
}

// {name: Array} of the batch's fields other than images (the tuple's first).
PyObject* OtherFields(PyTypeObject* array_type, const std::shared_ptr<Batch>& batch,
                      bool all_fields) {
  PyObject* fields = PyDict_New();
  if (fields == nullptr) {
    return nullptr;
  }
  for (const FieldSlice& field : batch->fields) {
    if (field.name == "images" && !all_fields) {
      continue;
    }
    PyObject* array = NewArray(
        array_type, {batch, batch->payload.data() + field.offset, field.dtype, field.shape});
    if (array == nullptr || PyDict_SetItemString(fields, field.name.c_str(), array) != 0) {
      Py_XDECREF(array);
      Py_DECREF(fields);
      return nullptr;
    }
    Py_DECREF(array);
  }
  return fields;
}

// (images, labels, indices, failed, epoch, index, decoded_with_warnings,
// {other field: Array}, {ragged field: lengths}); the Arrays share one
// reference to the batch, which goes back to the loader's pool when the last
// of them (or of what was imported from them) is freed.
PyObject* ToPython(PyObject* self, Batch&& received) {
  auto* state = static_cast<ModuleState*>(PyType_GetModuleState(Py_TYPE(self)));
  if (state == nullptr) {
    return nullptr;
  }
  auto batch = std::make_shared<Batch>(std::move(received));
  auto* array_type = reinterpret_cast<PyTypeObject*>(state->array_type);
  const int64_t size = batch->size();
  PyObject* images = NewArray(array_type, {batch,
                                           batch->payload.data(),
                                           ElementType::kUInt8,
                                           {size, batch->height, batch->width, batch->channels}});
  PyObject* labels =
      NewArray(array_type, {batch, batch->labels.data(), ElementType::kInt64, {size}});
  PyObject* indices =
      NewArray(array_type, {batch, batch->indices.data(), ElementType::kInt64, {size}});
  // A user's own dataset's fields are all "others", whatever their names.
  PyObject* others =
      OtherFields(array_type, batch, !Loader(self).dataset().sample_structure.empty());
  PyObject* lengths = RaggedLengths(*batch);
  if (images == nullptr || labels == nullptr || indices == nullptr || others == nullptr ||
      lengths == nullptr) {
    Py_XDECREF(images);
    Py_XDECREF(labels);
    Py_XDECREF(indices);
    Py_XDECREF(others);
    Py_XDECREF(lengths);
    return nullptr;
  }
  return Py_BuildValue("(NNNiILiNN)", images, labels, indices, batch->failed, batch->epoch,
                       static_cast<long long>(batch->index), batch->decoded_with_warnings, others,
                       lengths);
}

PyObject* Next(PyObject* self, PyObject* /*unused*/) {
  absl::StatusOr<std::optional<Batch>> batch;
  RemoteLoader& loader = Loader(self);
  LoaderMetrics* metrics = Metrics(self);
  // The clock is read only for a loader that serves metrics.
  const absl::Time asked = metrics != nullptr ? absl::Now() : absl::InfinitePast();
  Py_BEGIN_ALLOW_THREADS  // the trainer's other threads go on
      batch = loader.Next();
  Py_END_ALLOW_THREADS if (!batch.ok()) { return RaiseStatus(batch.status()); }
  if (!batch->has_value()) {
    Py_RETURN_NONE;
  }
  if (metrics != nullptr) {
    metrics->Taken(asked, absl::Now(), **batch);
  }
  return ToPython(self, std::move(**batch));
}

PyObject* Position(PyObject* self, PyObject* /*unused*/) {
  const LoaderPosition position = Loader(self).position();
  return Py_BuildValue("(IL)", position.epoch, static_cast<long long>(position.next_batch));
}

// Sets `dict[key] = value` and drops the reference to `value` (false, with
// an exception set, when either fails).
bool SetItem(PyObject* dict, const char* key, PyObject* value) {
  if (value == nullptr) {
    return false;
  }
  const int rc = PyDict_SetItemString(dict, key, value);
  Py_DECREF(value);
  return rc == 0;
}

PyObject* Stats(PyObject* self, PyObject* /*unused*/) {
  const LoaderStats stats = Loader(self).stats();
  PyObject* result = PyDict_New();
  if (result == nullptr) {
    return nullptr;
  }
  PyObject* depths = PyList_New(0);
  bool ok = depths != nullptr;
  for (size_t i = 0; ok && i < stats.depths.size(); ++i) {
    PyObject* depth = PyLong_FromLong(stats.depths[i]);
    ok = depth != nullptr && PyList_Append(depths, depth) == 0;
    Py_XDECREF(depth);
  }
  PyObject* servers = PyList_New(0);
  ok = ok && servers != nullptr;
  for (size_t i = 0; ok && i < stats.servers.size(); ++i) {
    PyObject* server = PyUnicode_FromStringAndSize(
        stats.servers[i].data(), static_cast<Py_ssize_t>(stats.servers[i].size()));
    ok = server != nullptr && PyList_Append(servers, server) == 0;
    Py_XDECREF(server);
  }
  ok = SetItem(result, "depths", depths) && ok && SetItem(result, "servers", servers) &&
       SetItem(result, "requested", PyLong_FromLongLong(stats.requested)) &&
       SetItem(result, "received", PyLong_FromLongLong(stats.received)) &&
       SetItem(result, "delivered", PyLong_FromLongLong(stats.delivered)) &&
       SetItem(result, "dropped", PyLong_FromLongLong(stats.dropped)) &&
       SetItem(result, "reassigned", PyLong_FromLongLong(stats.reassigned)) &&
       SetItem(result, "stalled", PyLong_FromLongLong(stats.stalled)) &&
       SetItem(result, "samples_failed", PyLong_FromLongLong(stats.samples_failed)) &&
       SetItem(result, "samples_decoded_with_warnings",
               PyLong_FromLongLong(stats.samples_decoded_with_warnings)) &&
       SetItem(result, "same_host_streams", PyLong_FromLong(stats.same_host_streams)) &&
       SetItem(result, "window", PyLong_FromLong(stats.window));
  if (!ok) {
    Py_DECREF(result);
    return nullptr;
  }
  return result;
}

PyObject* ClassNames(PyObject* self, PyObject* /*unused*/) {
  const std::vector<std::string>& names = Loader(self).dataset().class_names;
  PyObject* list = PyList_New(0);
  if (list == nullptr) {
    return nullptr;
  }
  for (const std::string& name : names) {
    PyObject* text =
        PyUnicode_DecodeUTF8(name.data(), static_cast<Py_ssize_t>(name.size()), "replace");
    if (text == nullptr || PyList_Append(list, text) != 0) {
      Py_XDECREF(text);
      Py_DECREF(list);
      return nullptr;
    }
    Py_DECREF(text);
  }
  return list;
}

PyObject* SampleStructure(PyObject* self, PyObject* /*unused*/) {
  const std::string& json = Loader(self).dataset().sample_structure;
  if (json.empty()) {
    Py_RETURN_NONE;
  }
  return PyUnicode_FromStringAndSize(json.data(), static_cast<Py_ssize_t>(json.size()));
}

PyObject* NumSamples(PyObject* self, PyObject* /*unused*/) {
  return PyLong_FromUnsignedLongLong(Loader(self).dataset().num_samples);
}

PyObject* SamplesPerRank(PyObject* self, PyObject* /*unused*/) {
  return PyLong_FromLongLong(Loader(self).samples_per_rank());
}

PyObject* Fingerprint(PyObject* self, PyObject* /*unused*/) {
  const std::string hex = FingerprintToHex(Loader(self).dataset().fingerprint);
  return PyUnicode_FromStringAndSize(hex.data(), static_cast<Py_ssize_t>(hex.size()));
}

PyObject* MetricsPort(PyObject* self, PyObject* /*unused*/) {
  if (const LoaderMetrics* metrics = Metrics(self)) {
    return PyLong_FromLong(metrics->port());
  }
  Py_RETURN_NONE;
}

Py_ssize_t Length(PyObject* self) { return static_cast<Py_ssize_t>(Loader(self).size()); }

PyMethodDef kMethods[] = {
    {"set_epoch", SetEpoch, METH_VARARGS,
     "set_epoch(epoch, next_batch=0): what the next batches are; fetching starts now"},
    {"next", Next, METH_NOARGS,
     "(images, labels, indices, failed, epoch, index, decoded_with_warnings, {field: Array}, "
     "{ragged field: lengths}), or None at the end of the epoch"},
    {"position", Position, METH_NOARGS, "(epoch, next batch)"},
    {"stats", Stats, METH_NOARGS, "requested, received, delivered, dropped, reassigned, ..."},
    {"class_names", ClassNames, METH_NOARGS, "the dataset's class names"},
    {"num_samples", NumSamples, METH_NOARGS, "samples in the dataset, all ranks together"},
    {"sample_structure", SampleStructure, METH_NOARGS,
     "a user's own Python dataset's sample structure (SampleNode as JSON), or None"},
    {"samples_per_rank", SamplesPerRank, METH_NOARGS, "samples of this rank per epoch"},
    {"fingerprint", Fingerprint, METH_NOARGS, "the dataset's fingerprint, in hex"},
    {"metrics_port", MetricsPort, METH_NOARGS,
     "the port serving Prometheus metrics at /metrics, or None"},
    {nullptr, nullptr, 0, nullptr}};

PyType_Slot kSlots[] = {
    {Py_tp_doc, const_cast<char*>("One rank's batches from heterodl data servers (see "
                                  "heterodl.RemoteDataLoader).")},
    {Py_tp_new, reinterpret_cast<void*>(New)},
    {Py_tp_dealloc, reinterpret_cast<void*>(Dealloc)},
    {Py_tp_methods, kMethods},
    {Py_mp_length, reinterpret_cast<void*>(Length)},
    {0, nullptr}};

PyType_Spec kSpec = {"heterodl._heterodl.Loader", sizeof(LoaderObject), 0,
                     Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE, kSlots};

}  // namespace

PyType_Spec* LoaderTypeSpec() { return &kSpec; }

}  // namespace heterodl
