// How the extension turns absl::Status into the exceptions a Python user
// catches, and how a C++ wait notices Ctrl-C.
#ifndef HETERODL_SRC_PYTHON_PYTHON_ERRORS_H_
#define HETERODL_SRC_PYTHON_PYTHON_ERRORS_H_

#include "absl/status/status.h"
#include "src/python/python_api.h"  // first: Python.h wants to be

namespace heterodl {

// Sets the Python exception for a failed `status` and returns nullptr, for
// `return RaiseStatus(status);` from a C function. ValueError for a bad
// argument (a pipeline the servers cannot parse included), TimeoutError when
// nothing came in time, ConnectionError when servers cannot be reached,
// PermissionError for a refused token or certificate, RuntimeError else.
// An exception already pending (a KeyboardInterrupt raised by
// PythonSignalRaised) is kept instead. REQUIRES: the GIL.
PyObject* RaiseStatus(const absl::Status& status);

// Runs Python's signal handlers from a wait in C++ that does not hold the
// GIL: true when one raised (Ctrl-C's KeyboardInterrupt), which stays pending
// for RaiseStatus to keep.
bool PythonSignalRaised();

}  // namespace heterodl

#endif  // HETERODL_SRC_PYTHON_PYTHON_ERRORS_H_
