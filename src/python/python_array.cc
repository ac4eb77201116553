#include "src/python/python_array.h"

#include <dlpack/dlpack.h>

#include <cstddef>
#include <new>
#include <utility>

namespace heterodl {
namespace {

// What lives in a Python object's memory, beside its header: a pointer, so
// that the C++ members need no placement in a C struct.
struct ArrayObject {
  PyObject_HEAD ArrayView* view;
  // The buffer protocol's shape and strides, in Py_ssize_t.
  std::vector<Py_ssize_t>* buffer_shape;
  std::vector<Py_ssize_t>* buffer_strides;
};

ArrayObject* AsArray(PyObject* self) { return reinterpret_cast<ArrayObject*>(self); }

// DLPack's code for booleans (one byte each), from DLPack 0.8 on; Debian's
// header is older. torch and NumPy read it.
constexpr auto kDLBool = static_cast<DLDataTypeCode>(6);

// How each element type reads in the buffer protocol, DLPack and NumPy.
struct ElementTraits {
  Py_ssize_t bytes;
  const char* format;  // struct module's
  DLDataType dlpack;
  const char* name;
};

ElementTraits TraitsOf(ElementType type) {
  switch (type) {
    case ElementType::kUInt8:
      return {1, "B", {kDLUInt, 8, 1}, "uint8"};
    case ElementType::kInt32:
      return {4, "i", {kDLInt, 32, 1}, "int32"};
    case ElementType::kInt64:
      return {8, "q", {kDLInt, 64, 1}, "int64"};
    case ElementType::kFloat32:
      return {4, "f", {kDLFloat, 32, 1}, "float32"};
    case ElementType::kBool:
      return {1, "?", {kDLBool, 8, 1}, "bool"};
    case ElementType::kInt8:
      return {1, "b", {kDLInt, 8, 1}, "int8"};
    case ElementType::kInt16:
      return {2, "h", {kDLInt, 16, 1}, "int16"};
    case ElementType::kFloat16:
      return {2, "e", {kDLFloat, 16, 1}, "float16"};
    case ElementType::kFloat64:
      return {8, "d", {kDLFloat, 64, 1}, "float64"};
  }
  return {1, "B", {kDLUInt, 8, 1}, "uint8"};
}

Py_ssize_t ItemSize(ElementType type) { return TraitsOf(type).bytes; }

Py_ssize_t Elements(const ArrayView& view) {
  Py_ssize_t count = 1;
  for (int64_t extent : view.shape) {
    count *= static_cast<Py_ssize_t>(extent);
  }
  return count;
}

void Dealloc(PyObject* self) {
  ArrayObject* array = AsArray(self);
  delete array->view;
  delete array->buffer_shape;
  delete array->buffer_strides;
  FreeInstance(self);
}

// ---- buffer protocol ---------------------------------------------------------

int GetBuffer(PyObject* self, Py_buffer* buffer, int flags) {
  ArrayObject* array = AsArray(self);
  const ArrayView& view = *array->view;
  buffer->buf = view.data;
  buffer->obj = Py_NewRef(self);
  buffer->itemsize = ItemSize(view.type);
  buffer->len = Elements(view) * buffer->itemsize;
  buffer->readonly = 0;  // the trainer may normalise in place
  buffer->format = nullptr;
  if ((flags & PyBUF_FORMAT) == PyBUF_FORMAT) {
    buffer->format = const_cast<char*>(TraitsOf(view.type).format);
  }
  buffer->ndim = static_cast<int>(view.shape.size());
  buffer->shape = nullptr;
  buffer->strides = nullptr;
  if ((flags & PyBUF_ND) == PyBUF_ND) {
    buffer->shape = array->buffer_shape->data();
  }
  if ((flags & PyBUF_STRIDES) == PyBUF_STRIDES) {
    buffer->strides = array->buffer_strides->data();
  }
  buffer->suboffsets = nullptr;
  buffer->internal = nullptr;
  return 0;
}

// ---- DLPack --------------------------------------------------------------------

// One export: the DLManagedTensor a consumer takes over, with what keeps its
// memory alive. Freed by the consumer through the deleter, or by the capsule
// when no consumer took it.
struct DlpackExport {
  DLManagedTensor managed{};
  std::shared_ptr<const void> owner;
  std::vector<int64_t> shape;
};

constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kUsedCapsuleName = "used_dltensor";

void DeleteExport(DLManagedTensor* managed) {
  delete static_cast<DlpackExport*>(managed->manager_ctx);
}

void DestroyCapsule(PyObject* capsule) {
  // A consumer renames the capsule it took over; only an untaken one is ours.
  if (!PyCapsule_IsValid(capsule, kCapsuleName)) {
    return;
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  if (managed != nullptr && managed->deleter != nullptr) {
    managed->deleter(managed);
  }
}

// __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None).
// The memory is host memory (pinned or not), so `stream` has nothing to
// order; a request for another device, or for a copy, is refused as the
// array API standard says, with BufferError.
PyObject* ExportDlpack(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"stream", "max_version", "dl_device", "copy", nullptr};
  PyObject* stream = Py_None;
  PyObject* max_version = Py_None;
  PyObject* dl_device = Py_None;
  PyObject* copy = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOO", const_cast<char**>(keywords), &stream,
                                   &max_version, &dl_device, &copy)) {
    return nullptr;
  }
  if (copy == Py_True) {
    PyErr_SetString(PyExc_BufferError, "heterodl arrays are exported without copying (copy=True)");
    return nullptr;
  }
  if (dl_device != Py_None) {
    long device_type = -1;
    long device_id = -1;
    if (!PyArg_ParseTuple(dl_device, "ll", &device_type, &device_id)) {
      return nullptr;
    }
    if (device_type != kDLCPU || device_id != 0) {
      PyErr_SetString(PyExc_BufferError, "heterodl arrays live in host memory (kDLCPU, 0)");
      return nullptr;
    }
  }
  const ArrayView& view = *AsArray(self)->view;
  auto* exported = new (std::nothrow) DlpackExport;
  if (exported == nullptr) {
    return PyErr_NoMemory();
  }
  exported->owner = view.owner;
  exported->shape = view.shape;
  DLTensor& tensor = exported->managed.dl_tensor;
  tensor.data = view.data;
  tensor.device = {kDLCPU, 0};
  tensor.ndim = static_cast<int32_t>(exported->shape.size());
  tensor.dtype = TraitsOf(view.type).dlpack;
  tensor.shape = exported->shape.data();
  tensor.strides = nullptr;  // C-contiguous
  tensor.byte_offset = 0;
  exported->managed.manager_ctx = exported;
  exported->managed.deleter = DeleteExport;
  PyObject* capsule = PyCapsule_New(&exported->managed, kCapsuleName, DestroyCapsule);
  if (capsule == nullptr) {
    delete exported;
  }
  return capsule;
}

PyObject* DlpackDevice(PyObject* /*self*/, PyObject* /*unused*/) {
  return Py_BuildValue("(ii)", static_cast<int>(kDLCPU), 0);
}

// ---- Python-visible attributes ------------------------------------------------

PyObject* Shape(PyObject* self, void* /*closure*/) {
  const ArrayView& view = *AsArray(self)->view;
  PyObject* shape = PyTuple_New(static_cast<Py_ssize_t>(view.shape.size()));
  if (shape == nullptr) {
    return nullptr;
  }
  for (size_t i = 0; i < view.shape.size(); ++i) {
    PyObject* extent = PyLong_FromLongLong(view.shape[i]);
    if (extent == nullptr) {
      Py_DECREF(shape);
      return nullptr;
    }
    PyTuple_SetItem(shape, static_cast<Py_ssize_t>(i), extent);  // steals
  }
  return shape;
}

PyObject* DType(PyObject* self, void* /*closure*/) {
  return PyUnicode_FromString(TraitsOf(AsArray(self)->view->type).name);
}

Py_ssize_t Length(PyObject* self) {
  const ArrayView& view = *AsArray(self)->view;
  return view.shape.empty() ? 0 : static_cast<Py_ssize_t>(view.shape[0]);
}

PyObject* Repr(PyObject* self) {
  PyObject* shape = Shape(self, nullptr);
  if (shape == nullptr) {
    return nullptr;
  }
  PyObject* text = PyUnicode_FromFormat("heterodl.Array(shape=%R, dtype=%s)", shape,
                                        TraitsOf(AsArray(self)->view->type).name);
  Py_DECREF(shape);
  return text;
}

PyMethodDef kMethods[] = {
    {"__dlpack__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(ExportDlpack)),
     METH_VARARGS | METH_KEYWORDS, "A DLPack capsule over this array's memory (no copy)."},
    {"__dlpack_device__", DlpackDevice, METH_NOARGS, "(kDLCPU, 0): host memory."},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef kAttributes[] = {
    {"shape", Shape, nullptr, "the array's shape, a tuple of ints", nullptr},
    {"dtype", DType, nullptr, "'uint8' (images) or 'int64' (labels, indices)", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyType_Slot kSlots[] = {
    {Py_tp_doc, const_cast<char*>("Batch memory exported without a copy, through DLPack "
                                  "(torch.from_dlpack, numpy.from_dlpack) or the buffer "
                                  "protocol (memoryview, numpy.asarray).")},
    {Py_tp_dealloc, reinterpret_cast<void*>(Dealloc)},
    {Py_tp_methods, kMethods},
    {Py_tp_getset, kAttributes},
    {Py_tp_repr, reinterpret_cast<void*>(Repr)},
    {Py_mp_length, reinterpret_cast<void*>(Length)},
    {Py_bf_getbuffer, reinterpret_cast<void*>(GetBuffer)},
    {0, nullptr}};

PyType_Spec kSpec = {"heterodl._heterodl.Array", sizeof(ArrayObject), 0,
                     Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE, kSlots};

}  // namespace

PyType_Spec* ArrayTypeSpec() { return &kSpec; }

PyObject* NewArray(PyTypeObject* type, ArrayView view) {
  PyObject* self = AllocateInstance(type);
  if (self == nullptr) {
    return nullptr;
  }
  ArrayObject* array = AsArray(self);
  const Py_ssize_t item_size = ItemSize(view.type);
  array->buffer_shape = new std::vector<Py_ssize_t>(view.shape.begin(), view.shape.end());
  array->buffer_strides = new std::vector<Py_ssize_t>(view.shape.size());
  Py_ssize_t stride = item_size;
  for (size_t i = view.shape.size(); i-- > 0;) {
    (*array->buffer_strides)[i] = stride;
    stride *= static_cast<Py_ssize_t>(view.shape[i]);
  }
  array->view = new ArrayView(std::move(view));
  return self;
}

}  // namespace heterodl
