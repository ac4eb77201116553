// The one place the extension includes Python.h (with the two calls every
// heap type of the module makes to create and free instances): every file of the module
// builds against CPython's limited API of 3.11, so one `abi3` wheel serves
// every CPython from 3.11 on (the GPU machine's 3.12 included) and no torch
// or NumPy headers are needed (docs/python.md, "One wheel").
#ifndef HETERODL_SRC_PYTHON_PYTHON_API_H_
#define HETERODL_SRC_PYTHON_PYTHON_API_H_

#define PY_SSIZE_T_CLEAN
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030B0000
#endif
#include <Python.h>

namespace heterodl {

// A new, zeroed instance of the heap type `type` (its tp_alloc, which also
// takes the reference to the type each instance holds); nullptr with
// MemoryError set when out of memory.
inline PyObject* AllocateInstance(PyTypeObject* type) {
  auto allocate = reinterpret_cast<allocfunc>(PyType_GetSlot(type, Py_tp_alloc));
  return allocate(type, 0);
}

// The end of a heap type's tp_dealloc, once the instance's own members are
// gone: frees it and drops the reference it held to its type.
inline void FreeInstance(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  auto free_object = reinterpret_cast<freefunc>(PyType_GetSlot(type, Py_tp_free));
  free_object(self);
  Py_DECREF(type);
}

}  // namespace heterodl

#endif  // HETERODL_SRC_PYTHON_PYTHON_API_H_
