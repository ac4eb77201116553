#include "src/python/python_loader.h"

#include <cstdint>
#include <limits>
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

// What a Loader is made with: the C++ loader's options and the extension's
// own settings.
struct LoaderSettings {
  RemoteLoaderOptions options;
  bool pin_memory = false;
  int pin_device = 0;
  int metrics_port = -1;  // -1: none
  int64_t epochs = 0;     // 0: no end
};

// Reads one option's Python value into the settings; false with a Python
// exception set when the value does not fit.
using OptionSetter = bool (*)(PyObject* value, LoaderSettings& settings);

bool ToString(PyObject* value, std::string& out) {
  Py_ssize_t size = 0;
  const char* text = PyUnicode_AsUTF8AndSize(value, &size);
  if (text == nullptr) {
    return false;
  }
  out.assign(text, static_cast<size_t>(size));
  return true;
}

bool ToDouble(PyObject* value, double& out) {
  out = PyFloat_AsDouble(value);
  return !(out == -1.0 && PyErr_Occurred() != nullptr);
}

template <typename T>
bool ToInteger(PyObject* value, T& out) {
  const long long integer = PyLong_AsLongLong(value);
  if (integer == -1 && PyErr_Occurred() != nullptr) {
    return false;
  }
  if (integer < static_cast<long long>(std::numeric_limits<T>::min()) ||
      (integer > 0 && static_cast<unsigned long long>(integer) >
                          static_cast<unsigned long long>(std::numeric_limits<T>::max()))) {
    PyErr_SetString(PyExc_OverflowError, "a Loader option's integer is out of range");
    return false;
  }
  out = static_cast<T>(integer);
  return true;
}

bool ToBool(PyObject* value, bool& out) {
  const int truth = PyObject_IsTrue(value);
  out = truth == 1;
  return truth >= 0;
}

bool ToSeconds(PyObject* value, absl::Duration& out) {
  double seconds = 0;
  if (!ToDouble(value, seconds)) {
    return false;
  }
  out = absl::Seconds(seconds);
  return true;
}

// The server list, a Python list of str.
bool ToServers(PyObject* list, std::vector<std::string>& servers) {
  if (!PyList_Check(list)) {
    PyErr_SetString(PyExc_TypeError, "servers must be a list of 'host:port' strings");
    return false;
  }
  for (Py_ssize_t i = 0; i < PyList_Size(list); ++i) {
    if (!ToString(PyList_GetItem(list, i), servers.emplace_back())) {
      return false;
    }
  }
  return true;
}

// Every option a Loader takes, by its keyword: the one list of them (the
// Python package passes what it checked as a dict of these names; a name
// not here is a TypeError). loader.py's RemoteDataLoader documents them.
struct LoaderOption {
  const char* name;
  OptionSetter set;
};
// clang-format off
constexpr LoaderOption kLoaderOptions[] = {
    {"servers", [](PyObject* v, LoaderSettings& s) { return ToServers(v, s.options.servers.fixed); }},
    {"servers_file", [](PyObject* v, LoaderSettings& s) { return ToString(v, s.options.servers.servers_file); }},
    {"servers_dns", [](PyObject* v, LoaderSettings& s) { return ToString(v, s.options.servers.dns_name); }},
    {"batch_size", [](PyObject* v, LoaderSettings& s) { return ToInteger(v, s.options.batch_size); }},
    {"pipeline", [](PyObject* v, LoaderSettings& s) { return ToString(v, s.options.pipeline); }},
    {"rank", [](PyObject* v, LoaderSettings& s) { return ToInteger(v, s.options.rank); }},
    {"world_size", [](PyObject* v, LoaderSettings& s) { return ToInteger(v, s.options.world_size); }},
    {"seed", [](PyObject* v, LoaderSettings& s) {
       s.options.seed = PyLong_AsUnsignedLongLong(v);
       return PyErr_Occurred() == nullptr;
     }},
    {"drop_last", [](PyObject* v, LoaderSettings& s) { return ToBool(v, s.options.drop_last); }},
    {"shuffle", [](PyObject* v, LoaderSettings& s) { return ToBool(v, s.options.shuffle); }},
    {"shuffle_block_shards", [](PyObject* v, LoaderSettings& s) { return ToInteger(v, s.options.shuffle_block_shards); }},
    {"epoch_offset", [](PyObject* v, LoaderSettings& s) { return ToInteger(v, s.options.epoch_offset); }},
    {"max_buffered_mb", [](PyObject* v, LoaderSettings& s) {
       double mb = 0;
       s.options.max_buffered_bytes = ToDouble(v, mb) ? static_cast<uint64_t>(mb * (1 << 20)) : 0;
       return PyErr_Occurred() == nullptr;
     }},
    {"connections_per_server", [](PyObject* v, LoaderSettings& s) { return ToInteger(v, s.options.connections_per_server); }},
    {"connect_timeout", [](PyObject* v, LoaderSettings& s) { return ToSeconds(v, s.options.connect_timeout); }},
    {"stall_timeout", [](PyObject* v, LoaderSettings& s) { return ToSeconds(v, s.options.stall_timeout); }},
    {"max_failed_fraction", [](PyObject* v, LoaderSettings& s) { return ToDouble(v, s.options.max_failed_fraction); }},
    {"auth_token", [](PyObject* v, LoaderSettings& s) { return v == Py_None || ToString(v, s.options.auth_token); }},
    {"tls_ca", [](PyObject* v, LoaderSettings& s) { return ToString(v, s.options.tls.ca_file); }},
    {"tls_cert", [](PyObject* v, LoaderSettings& s) { return ToString(v, s.options.tls.cert_file); }},
    {"tls_key", [](PyObject* v, LoaderSettings& s) { return ToString(v, s.options.tls.key_file); }},
    {"tls_server_name", [](PyObject* v, LoaderSettings& s) { return ToString(v, s.options.tls.server_name); }},
    {"pixel_channel", [](PyObject* v, LoaderSettings& s) { return ToBool(v, s.options.pixel_channel); }},
    {"pin_memory", [](PyObject* v, LoaderSettings& s) { return ToBool(v, s.pin_memory); }},
    {"pin_device", [](PyObject* v, LoaderSettings& s) { return ToInteger(v, s.pin_device); }},
    {"metrics_port", [](PyObject* v, LoaderSettings& s) { return ToInteger(v, s.metrics_port); }},
    {"epochs", [](PyObject* v, LoaderSettings& s) { return ToInteger(v, s.epochs); }},
};
// clang-format on

// The settings a dict of options names. False with a Python exception set.
bool ParseSettings(PyObject* options, LoaderSettings& settings) {
  if (!PyDict_Check(options)) {
    PyErr_SetString(PyExc_TypeError, "Loader takes a dict of options");
    return false;
  }
  Py_ssize_t position = 0;
  PyObject* key = nullptr;
  PyObject* value = nullptr;
  while (PyDict_Next(options, &position, &key, &value)) {
    std::string name;
    if (!ToString(key, name)) {
      return false;
    }
    const LoaderOption* option = nullptr;
    for (const LoaderOption& known : kLoaderOptions) {
      if (name == known.name) {
        option = &known;
      }
    }
    if (option == nullptr) {
      PyErr_SetString(PyExc_TypeError, ("Loader has no option '" + name + "'").c_str());
      return false;
    }
    if (!option->set(value, settings)) {
      return false;
    }
  }
  return true;
}

PyObject* New(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject* given = nullptr;
  static const char* keywords[] = {"options", nullptr};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O", const_cast<char**>(keywords), &given)) {
    return nullptr;
  }
  LoaderSettings settings;
  if (!ParseSettings(given, settings)) {
    return nullptr;
  }
  RemoteLoaderOptions& options = settings.options;
  options.interrupt_connect = PythonSignalRaised;
  options.interrupt_next = PythonSignalRaised;
  if (settings.pin_memory) {
    absl::StatusOr<HostAllocator> pinned = CudaHostAllocator(settings.pin_device);
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
  if (settings.epochs > 0) {
    const absl::Status ended =
        (*loader)->SetEnd(static_cast<uint32_t>(settings.epochs - 1), (*loader)->size());
    if (!ended.ok()) {
      return RaiseStatus(ended);
    }
  }
  std::unique_ptr<LoaderMetrics> metrics;
  if (settings.metrics_port >= 0) {
    absl::StatusOr<std::unique_ptr<LoaderMetrics>> started =
        LoaderMetrics::Start(settings.metrics_port, options);
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

// {name: Array} of every field of the batch, in payload order.
PyObject* Fields(PyTypeObject* array_type, const std::shared_ptr<Batch>& batch) {
  PyObject* fields = PyDict_New();
  if (fields == nullptr) {
    return nullptr;
  }
  for (const FieldSlice& field : batch->fields) {
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

// [str] of the batch's failure reasons.
PyObject* Failures(const Batch& batch) {
  PyObject* list = PyList_New(0);
  if (list == nullptr) {
    return nullptr;
  }
  for (const std::string& reason : batch.failures) {
    PyObject* text =
        PyUnicode_DecodeUTF8(reason.data(), static_cast<Py_ssize_t>(reason.size()), "replace");
    if (text == nullptr || PyList_Append(list, text) != 0) {
      Py_XDECREF(text);
      Py_DECREF(list);
      return nullptr;
    }
    Py_DECREF(text);
  }
  return list;
}

// The batch as a dict of named parts (see python_loader.h); its Arrays
// share one reference to the batch, which goes back to the loader's pool
// when the last of them (or of what was imported from them) is freed.
PyObject* ToPython(PyObject* self, Batch&& received) {
  auto* state = static_cast<ModuleState*>(PyType_GetModuleState(Py_TYPE(self)));
  if (state == nullptr) {
    return nullptr;
  }
  auto batch = std::make_shared<Batch>(std::move(received));
  auto* array_type = reinterpret_cast<PyTypeObject*>(state->array_type);
  const int64_t size = batch->size();
  static_assert(sizeof(SlotStatus) == 1, "statuses go out as uint8");
  PyObject* result = PyDict_New();
  if (result == nullptr) {
    return nullptr;
  }
  const bool ok =
      SetItem(result, "fields", Fields(array_type, batch)) &&
      SetItem(result, "lengths", RaggedLengths(*batch)) &&
      SetItem(result, "labels",
              NewArray(array_type, {batch, batch->labels.data(), ElementType::kInt64, {size}})) &&
      SetItem(result, "indices",
              NewArray(array_type, {batch, batch->indices.data(), ElementType::kInt64, {size}})) &&
      SetItem(result, "sources",
              NewArray(array_type, {batch, batch->sources.data(), ElementType::kInt64, {size}})) &&
      SetItem(result, "status",
              NewArray(array_type, {batch, batch->status.data(), ElementType::kUInt8, {size}})) &&
      SetItem(result, "failures", Failures(*batch)) &&
      SetItem(result, "failed", PyLong_FromLong(batch->failed)) &&
      SetItem(result, "decoded_with_warnings", PyLong_FromLong(batch->decoded_with_warnings)) &&
      SetItem(result, "epoch", PyLong_FromUnsignedLong(batch->epoch)) &&
      SetItem(result, "index", PyLong_FromLongLong(batch->index));
  if (!ok) {
    Py_DECREF(result);
    return nullptr;
  }
  return result;
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
       SetItem(result, "held_ahead", PyLong_FromLong(stats.held_ahead)) &&
       SetItem(result, "in_flight", PyLong_FromLong(stats.in_flight)) &&
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
     "the next batch as a dict (fields, lengths, labels, indices, sources, status, failures, "
     "failed, decoded_with_warnings, epoch, index), or None at the end of the epoch"},
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
