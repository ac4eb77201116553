// The one place the extension includes Python.h: every file of the module
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

#endif  // HETERODL_SRC_PYTHON_PYTHON_API_H_
