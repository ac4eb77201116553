// heterodl._heterodl.Loader: a RemoteLoader (src/client) as a Python object.
// The package's RemoteDataLoader (heterodl/loader.py) checks arguments and
// turns the Arrays it returns into torch tensors or NumPy arrays; this type
// only wires the C++ loader to Python: GIL released while it waits, Ctrl-C
// honoured, errors as exceptions.
//
// Python's view:
//   Loader(servers: list[str], batch_size, pipeline, rank, world_size, seed,
//          drop_last, shuffle, max_buffered_mb, connections_per_server,
//          connect_timeout, stall_timeout, auth_token: str | None,
//          pin_memory, tls_ca, tls_cert, tls_key, tls_server_name,
//          pixel_channel, pin_device=0, servers_file="", servers_dns="",
//          metrics_port=-1)
//   .set_epoch(epoch, next_batch=0)  -> None, the loader starts fetching
//   .next() -> (images, labels, indices, failed, epoch, index,
//               decoded_with_warnings, {other field: Array},
//               {ragged field: (length, ...)}) | None at the end of the
//              epoch; the first three are Arrays, the first dict holds the
//              batch's other fields (masks; boxes, box_labels, iscrowd of
//              all samples), the second each sample's count in the ragged
//              ones
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
