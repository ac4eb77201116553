#include "src/python/python_errors.h"

#include <string>

namespace heterodl {

PyObject* RaiseStatus(const absl::Status& status) {
  if (PyErr_Occurred() != nullptr) {
    return nullptr;
  }
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
  PyErr_SetString(type, std::string(status.message()).c_str());
  return nullptr;
}

bool PythonSignalRaised() {
  const PyGILState_STATE gil = PyGILState_Ensure();
  const bool raised = PyErr_CheckSignals() != 0;
  PyGILState_Release(gil);
  return raised;
}

}  // namespace heterodl
