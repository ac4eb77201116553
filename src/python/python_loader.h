// heterodl._heterodl.Loader: a RemoteLoader (src/client) as a Python object.
// The package's RemoteDataLoader (heterodl/loader.py) checks arguments and
// turns the Arrays it returns into torch tensors or NumPy arrays; this type
// only wires the C++ loader to Python: GIL released while it waits, Ctrl-C
// honoured, errors as exceptions.
//
// Python's view:
//   Loader(options: dict)  the options by name, as python_loader.cc's one
//                          table of them reads them (servers, batch_size,
//                          pipeline, rank, world_size, seed, ...); a name it
//                          does not know is a TypeError
//   .set_epoch(epoch, next_batch=0)  -> None, the loader starts fetching
//   .next() -> dict | None at the end of the epoch: "fields" {name: Array}
//              (every field, in payload order), "lengths" {ragged field:
//              (count per sample, ...)}, "labels", "indices" (planned),
//              "sources" (the sample each slot holds: int64, -1 unfilled)
//              and "status" (uint8: 0 ok, 1 replaced, 2 unfilled) Arrays,
//              "failures" [str], "failed", "decoded_with_warnings",
//              "epoch", "index"
//   .position() -> (epoch, next_batch);  .stats() -> dict;  len(loader)
//   .class_names() -> list[str];  .num_samples() -> int
//   .metrics_port() -> int | None: where its Prometheus metrics are served
#ifndef HETERODL_SRC_PYTHON_PYTHON_LOADER_H_
#define HETERODL_SRC_PYTHON_PYTHON_LOADER_H_

#include "src/python/python_api.h"  // first: Python.h wants to be

namespace heterodl {

// The spec of the Loader type; made with PyType_FromModuleAndSpec from a
// module whose state is a ModuleState (next() finds the Array type there).
PyType_Spec* LoaderTypeSpec();

// The extension module's state: its heap types.
struct ModuleState {
  PyObject* array_type = nullptr;
  PyObject* loader_type = nullptr;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_PYTHON_PYTHON_LOADER_H_
