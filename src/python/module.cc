// The `heterodl._heterodl` extension: the client side of heterodl (remote
// loader, wire, TLS, auth) for Python, linking neither LibTorch nor NumPy nor
// CUDA. heterodl/loader.py turns its Arrays into the caller's tensors.
#include <string>
#include <vector>

#include "src/client/shutdown.h"
#include "src/common/log.h"
#include "src/python/python_api.h"  // first: Python.h wants to be
#include "src/python/python_array.h"
#include "src/python/python_errors.h"
#include "src/python/python_loader.h"
#include "src/rpc/grpc_lifetime.h"
#include "src/rpc/grpc_logging.h"

namespace heterodl {
namespace {

// _shutdown_servers(servers, reason, timeout, auth_token, tls_ca, tls_cert,
// tls_key, tls_server_name)
PyObject* ShutdownServers(PyObject* /*module*/, PyObject* args) {
  PyObject* list = nullptr;
  const char* reason = "";
  double timeout = 10;
  const char* auth_token = nullptr;
  TlsConfig tls;
  const char *ca = "", *cert = "", *key = "", *server_name = "";
  if (!PyArg_ParseTuple(args, "O!sdzssss", &PyList_Type, &list, &reason, &timeout, &auth_token, &ca,
                        &cert, &key, &server_name)) {
    return nullptr;
  }
  std::vector<std::string> servers;
  for (Py_ssize_t i = 0; i < PyList_Size(list); ++i) {
    const char* server = PyUnicode_AsUTF8AndSize(PyList_GetItem(list, i), nullptr);
    if (server == nullptr) {
      return nullptr;
    }
    servers.emplace_back(server);
  }
  tls.ca_file = ca;
  tls.cert_file = cert;
  tls.key_file = key;
  tls.server_name = server_name;
  const std::string token = auth_token != nullptr ? auth_token : "";
  const std::string why = reason;
  absl::Status status;
  Py_BEGIN_ALLOW_THREADS status =
      ShutdownDataServers(servers, why, absl::Seconds(timeout), token, tls);
  Py_END_ALLOW_THREADS if (!status.ok()) { return RaiseStatus(status); }
  Py_RETURN_NONE;
}

PyObject* SetLogLevel(PyObject* /*module*/, PyObject* args) {
  const char* name = nullptr;
  if (!PyArg_ParseTuple(args, "s", &name)) {
    return nullptr;
  }
  const std::optional<LogLevel> level = ParseLogLevel(name);
  if (!level) {
    PyErr_SetString(PyExc_ValueError, "log level must be debug, info, warning or error");
    return nullptr;
  }
  SetMinLogLevel(*level);
  Py_RETURN_NONE;
}

ModuleState* State(PyObject* module) {
  return static_cast<ModuleState*>(PyModule_GetState(module));
}

// Adds a heap type made from `spec` to the module as `name` and keeps a
// reference in `slot`.
bool AddType(PyObject* module, PyType_Spec* spec, const char* name, PyObject*& slot) {
  slot = PyType_FromModuleAndSpec(module, spec, nullptr);
  if (slot == nullptr) {
    return false;
  }
  Py_INCREF(slot);
  if (PyModule_AddObject(module, name, slot) != 0) {
    Py_DECREF(slot);
    return false;
  }
  return true;
}

int Exec(PyObject* module) {
  // A loader destroyed as the interpreter exits must not wait on gRPC's own
  // shutdown.
  KeepGrpcUntilExit();
  RouteGrpcLogsToOurs();
  ModuleState* state = State(module);
  if (!AddType(module, ArrayTypeSpec(), "Array", state->array_type) ||
      !AddType(module, LoaderTypeSpec(), "Loader", state->loader_type)) {
    return -1;
  }
  return PyModule_AddStringConstant(module, "__version__", HETERODL_VERSION);
}

int Traverse(PyObject* module, visitproc visit, void* arg) {
  ModuleState* state = State(module);
  if (state == nullptr) {
    return 0;
  }
  Py_VISIT(state->array_type);
  Py_VISIT(state->loader_type);
  return 0;
}

int Clear(PyObject* module) {
  ModuleState* state = State(module);
  if (state == nullptr) {
    return 0;
  }
  Py_CLEAR(state->array_type);
  Py_CLEAR(state->loader_type);
  return 0;
}

PyMethodDef kFunctions[] = {
    {"_shutdown_servers", ShutdownServers, METH_VARARGS,
     "tells data servers to shut down (heterodl.shutdown_servers)"},
    {"_set_log_level", SetLogLevel, METH_VARARGS, "debug, info, warning or error"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef_Slot kSlots[] = {{Py_mod_exec, reinterpret_cast<void*>(Exec)}, {0, nullptr}};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT,
                       "_heterodl",
                       "heterodl's client side, compiled (see heterodl/__init__.py)",
                       sizeof(ModuleState),
                       kFunctions,
                       kSlots,
                       Traverse,
                       Clear,
                       nullptr};

}  // namespace
}  // namespace heterodl

// The name CPython looks for: PyInit_ and the module's.
// NOLINTNEXTLINE(bugprone-reserved-identifier,readability-identifier-naming)
PyMODINIT_FUNC PyInit__heterodl() { return PyModuleDef_Init(&heterodl::kModule); }
