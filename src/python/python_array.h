// heterodl._heterodl.Array: a received batch's pixels, labels or indices as a
// Python object that owns no copy. It exports its memory both ways a Python
// array library imports without copying:
//   - DLPack (`__dlpack__`, `__dlpack_device__`): torch.from_dlpack,
//     numpy.from_dlpack, jax.dlpack.from_dlpack, cupy.from_dlpack;
//   - the buffer protocol: memoryview, numpy.asarray, torch.frombuffer.
// The memory stays valid while the Array, or anything imported from it, is
// alive: each holds a reference to the batch it came from.
#ifndef HETERODL_SRC_PYTHON_PYTHON_ARRAY_H_
#define HETERODL_SRC_PYTHON_PYTHON_ARRAY_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "src/python/python_api.h"  // first: Python.h wants to be
#include "src/wire/field_slice.h"

namespace heterodl {

// What an Array shows: `shape` elements of `type` at `data`, C-contiguous,
// kept alive by `owner`.
struct ArrayView {
  std::shared_ptr<const void> owner;
  void* data = nullptr;
  ElementType type = ElementType::kUInt8;
  std::vector<int64_t> shape;
};

// The Array type's spec, for PyType_FromModuleAndSpec.
PyType_Spec* ArrayTypeSpec();

// A new Array of `type` (made from ArrayTypeSpec) over `view`, or nullptr
// with a Python exception set. REQUIRES: the GIL.
PyObject* NewArray(PyTypeObject* type, ArrayView view);

}  // namespace heterodl

#endif  // HETERODL_SRC_PYTHON_PYTHON_ARRAY_H_
