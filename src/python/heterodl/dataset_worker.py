"""The Python side of a user's own dataset served by heterodl: what a worker
process does with a map-style dataset (`__len__`, `__getitem__`).

    dataset = load_dataset("my_module:make_dataset", python_path=["/code"])
    fields = describe(dataset.sample(seed=1, epoch=0, index=0))
    buffers = {f.name: numpy.empty((batch,) + f.shape, f.dtype) for f in fields}
    collate_into([dataset.sample(1, 0, i) for i in indices], fields, buffers)

A sample is an array (NumPy, a torch tensor, anything with `__array__` or
DLPack), a Python number, or a tuple, list or dict of them, nested. Samples
are collated as PyTorch's `default_collate` does: the same structure, each
leaf stacked along a new first dimension; Python ints become int64, floats
float64 and bools bool, as `torch.tensor` makes them. The stacking writes
into buffers the caller owns (the server's shared batch memory), one copy
per sample.

A field whose first dimension differs from sample to sample (a sample's
tokens, boxes, points) is declared ragged by the dataset, by its name in a
`ragged_fields` attribute (`ragged_fields = ("tokens",)`): a batch then
holds the list of the samples' arrays. Its elements travel after the
sample's record, not through the shared memory (SAMPLE_RECORD_BYTES each).

A module that defines `collate_fn(samples)` batches its own way: a worker
makes a whole batch's samples and collates them with it (`_make_batch`),
and the batch's leaves, whatever their shape in that batch, are written
into the server's memory once it has sized them (`_write_batch`).

Every sample is drawn with Python's `random`, NumPy's global generator and
torch's (when the dataset imported it) seeded from (seed, epoch, index), so
a transform that draws random numbers gives the same sample on any server.

Errors name what went wrong and where: DatasetLoadError when the dataset
cannot be imported or made, SampleError for a sample of an unsupported type
or one whose structure, dtype or shape differs from the first's (with the
field's path, e.g. `sample["boxes"]`).

Internal to heterodl's data group: the server runs it in worker processes,
never in its own.
"""

from __future__ import annotations  # numpy's names in annotations, even without NumPy

import argparse
import ctypes
import dataclasses
import hashlib
import importlib
import json
import mmap
import numbers
import os
import random
import re
import signal
import socket
import struct
import sys
import traceback
from collections.abc import Mapping, Sequence

try:
    import numpy
except ImportError as missing:  # said to the server by main(), which logs it
    numpy = None
    _NUMPY_MISSING = missing


class DatasetLoadError(Exception):
    """The dataset module or callable could not be imported or called."""


class SampleError(Exception):
    """A sample the batch contract cannot carry."""


# Elements of one sample in a ragged field, at most (batch_layout.h's
# kMaxRaggedLength).
MAX_RAGGED_LENGTH = 1 << 16
# The raw records a sample's ragged bytes follow its result in.
SAMPLE_RECORD_BYTES = 1 << 16

# The dtypes a batch field may have (data_service.proto's DType).
DTYPES = ("uint8", "int32", "int64", "float32", "bool", "int8", "int16", "float16", "float64")


@dataclasses.dataclass(frozen=True)
class Field:
    """One leaf of a sample: its path from the sample's root, as Python
    would index it (`[0]`, `["boxes"]`), and its per-sample dtype and shape;
    for a ragged field, the shape of one element (the leaf's shape less its
    first dimension, which varies); for a collated one (a leaf of a
    collate_fn's batch), the shape of the batch it was described with."""

    path: str
    dtype: numpy.dtype
    shape: tuple
    ragged: bool = False
    collated: bool = False

    @property
    def name(self):
        return self.path


def sample_seed(seed, epoch, index):
    """The 64-bit seed of sample `index` in `epoch`: a hash of the three, the
    same in every process and on every machine (Python's hash() is salted)."""
    digest = hashlib.blake2b(struct.pack("<QQQ", seed & (2**64 - 1), epoch, index),
                             digest_size=8).digest()
    return int.from_bytes(digest, "little")


def seed_generators(seed):
    """Seeds Python's, NumPy's global and (when imported) torch's CPU
    generators, as DataLoader's workers seed theirs. torch's CPU generator
    alone: torch.manual_seed also visits every accelerator backend, 90 us a
    call (a tenth of a photo's decode and augment), and a data host's
    samples are made on its CPUs."""
    random.seed(seed)
    numpy.random.seed(seed & 0xFFFFFFFF)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.default_generator.manual_seed(seed)


class LoadedDataset:
    """A user's dataset and, when its module defines one, its collate_fn."""

    def __init__(self, dataset, collate_fn):
        self.dataset = dataset
        self.collate_fn = collate_fn

    def __len__(self):
        return len(self.dataset)

    def sample(self, seed, epoch, index):
        """Sample `index`, its randomness drawn from (seed, epoch, index)."""
        seed_generators(sample_seed(seed, epoch, index))
        return self.dataset[index]


def load_dataset(spec, python_path=()):
    """Imports MODULE and calls CALLABLE() (spec "MODULE:CALLABLE"), with the
    directories of `python_path` searched first."""
    module_name, separator, callable_name = spec.partition(":")
    if not separator or not module_name or not callable_name:
        raise DatasetLoadError(f"{spec!r}: expected MODULE:CALLABLE, e.g. my_data:make_dataset")
    for directory in reversed(list(python_path)):
        if directory not in sys.path:
            sys.path.insert(0, directory)
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise DatasetLoadError(
            f"cannot import {module_name!r}: {type(error).__name__}: {error}") from error
    factory = getattr(module, callable_name, None)
    if factory is None or not callable(factory):
        raise DatasetLoadError(f"module {module_name!r} has no callable {callable_name!r}")
    try:
        dataset = factory()
    except Exception as error:
        raise DatasetLoadError(
            f"{spec}() raised {type(error).__name__}: {error}") from error
    for method in ("__len__", "__getitem__"):
        if not hasattr(dataset, method):
            raise DatasetLoadError(
                f"{spec}() returned a {type(dataset).__qualname__}, which has no {method}: "
                "a map-style dataset is needed")
    collate_fn = getattr(module, "collate_fn", None)
    if collate_fn is not None and not callable(collate_fn):
        raise DatasetLoadError(f"{module_name}.collate_fn is not callable")
    return LoadedDataset(dataset, collate_fn)


def _leaf_array(value, path):
    """A leaf as an array, as default_collate would make its tensor."""
    where = path or "the sample"
    if isinstance(value, (str, bytes)):
        raise SampleError(f"{where}: a {type(value).__name__} is not supported "
                          "(arrays, numbers, and tuples, lists or dicts of them are)")
    if isinstance(value, bool):
        return numpy.asarray(value, dtype=numpy.bool_)
    if isinstance(value, numpy.ndarray | numpy.generic):
        array = numpy.asarray(value)
    elif isinstance(value, numbers.Integral):
        if not -2**63 <= int(value) < 2**63:
            raise SampleError(f"{where}: {value} does not fit int64")
        return numpy.asarray(int(value), dtype=numpy.int64)
    elif isinstance(value, numbers.Real):
        return numpy.asarray(float(value), dtype=numpy.float64)
    elif hasattr(value, "__dlpack__"):
        try:
            array = numpy.from_dlpack(value.detach() if hasattr(value, "detach") else value)
        except (TypeError, RuntimeError, BufferError) as error:
            raise SampleError(f"{where}: a {type(value).__qualname__} NumPy cannot read "
                              f"through DLPack ({error}); return it on the CPU") from error
    elif hasattr(value, "__array__"):
        array = numpy.asarray(value)
    else:
        raise SampleError(f"{where}: a {type(value).__qualname__} is not supported "
                          "(arrays, numbers, and tuples, lists or dicts of them are)")
    if array.dtype == object or array.dtype.kind in "USV":
        raise SampleError(f"{where}: an array of {array.dtype} is not supported (numbers only)")
    return array


def _walk(sample, path, leaves):
    """Appends (path, array) for every leaf of `sample`, depth first, in the
    order default_collate keeps (dict insertion order, sequence order)."""
    if isinstance(sample, Mapping):
        for key, value in sample.items():
            if not isinstance(key, str):
                raise SampleError(f"{path or 'the sample'}: dict key {key!r} is not a string")
            _walk(value, f"{path}[{key!r}]", leaves)
    elif isinstance(sample, Sequence) and not isinstance(sample, (str, bytes)):
        if len(sample) == 0:
            raise SampleError(f"{path or 'the sample'}: an empty {type(sample).__name__}")
        for i, value in enumerate(sample):
            _walk(value, f"{path}[{i}]", leaves)
    else:
        leaves.append((path, _leaf_array(sample, path)))


def leaves(sample):
    """The sample's leaves, (path, array) in collation order."""
    found = []
    _walk(sample, "", found)
    return found


def describe(sample, ragged=()):
    """The fields a batch of samples shaped like this one has; the leaves at
    the indices in `ragged` are ragged fields."""
    fields = []
    for i, (path, array) in enumerate(leaves(sample)):
        if i not in ragged:
            fields.append(Field(path, array.dtype, array.shape))
        elif array.ndim == 0:
            raise SampleError(f"{path or 'the sample'}: a ragged field needs a first dimension "
                              "(its elements), and this is a scalar")
        else:
            fields.append(Field(path, array.dtype, array.shape[1:], ragged=True))
    return fields


def _matching_arrays(sample, fields, here, first, advice):
    """The sample's leaf arrays, one per field, after checking that its
    fields, shapes and dtypes are those of `fields` (`first`'s): else a
    SampleError naming the leaf, `here` saying which sample this is ("" for
    the one at hand) and `advice` what to do about a shape."""
    found = leaves(sample)
    if [path for path, _ in found] != [field.path for field in fields]:
        raise SampleError(f"{here or 'the sample'} has fields {[path for path, _ in found]}, "
                          f"{first} {[field.path for field in fields]}")
    at = f" in {here}" if here else ""
    for field, (path, array) in zip(fields, found):
        where = path or "the sample"
        if field.ragged:
            if array.ndim == 0 or array.shape[1:] != field.shape:
                raise SampleError(f"{where}: shape {array.shape}{at}; a ragged field's elements "
                                  f"are {field.shape} in {first}")
            if array.shape[0] > MAX_RAGGED_LENGTH:
                raise SampleError(f"{where}: {array.shape[0]} elements, more than the "
                                  f"{MAX_RAGGED_LENGTH} a ragged field's sample may hold")
        elif array.shape != field.shape:
            raise SampleError(f"{where}: shape {array.shape}{at}, {field.shape} in {first}; "
                              f"{advice}")
        if array.dtype != field.dtype:
            raise SampleError(f"{where}: dtype {array.dtype}{at}, {field.dtype} in {first}")
    return [array for _, array in found]


RESIZE_ADVICE = ("resize in the dataset, or, when only the first dimension varies, declare "
                 "the field ragged (ragged_fields = (NAME, ...) on the dataset)")


def collate_into(samples, fields, buffers):
    """Writes sample i's leaves into row i of each dense field's buffer
    (shape [len(samples), *field.shape], field.dtype), and appends them to
    a ragged field's buffer (a list). Every sample must have the fields
    `describe` gave for the first: a leaf missing, added, of another dtype
    or another shape is a SampleError naming it."""
    for i, sample in enumerate(samples):
        arrays = _matching_arrays(sample, fields, f"sample {i} of the batch", "the first sample",
                                  "samples of a batch must agree (" + RESIZE_ADVICE + ")")
        for field, array in zip(fields, arrays):
            if field.ragged:
                buffers[field.name].append(array)
            else:
                buffers[field.name][i] = array


def rebuild(sample, columns):
    """The batch in the sample's structure: `sample` (one sample, for its
    shape) with each leaf replaced by its collated column, as
    default_collate returns it: dicts and lists as they are, a namedtuple as
    its own type, a plain tuple as a list."""
    return _rebuild(sample, "", columns)


def _rebuild(sample, path, columns):
    if isinstance(sample, Mapping):
        return {key: _rebuild(value, f"{path}[{key!r}]", columns) for key, value in sample.items()}
    if isinstance(sample, Sequence) and not isinstance(sample, (str, bytes)):
        items = [_rebuild(value, f"{path}[{i}]", columns) for i, value in enumerate(sample)]
        if isinstance(sample, tuple) and hasattr(sample, "_fields"):
            return type(sample)(*items)
        return items
    return columns[path]


def _name_part(key):
    return re.sub(r"[^a-z0-9_]", "_", str(key).lower())


def structure(sample):
    """The sample's structure as data_service.proto's SampleNode (in its
    JSON form) and a wire name per leaf, in collation order: a dict's keys
    (`{"image": ..., "label": ...}` gives image, label), joined by "_" when
    nested, `field_0`, `field_1`, ... for a tuple's or list's items."""
    names = []

    def node(value, parts):
        if isinstance(value, Mapping):
            keys = list(value.keys())
            return {"kind": "DICT", "keys": keys,
                    "items": [node(value[k], parts + [_name_part(k)]) for k in keys]}
        if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
            items = [node(v, parts + [str(i)]) for i, v in enumerate(value)]
            if isinstance(value, tuple) and hasattr(value, "_fields"):
                return {"kind": "NAMEDTUPLE", "type_name": type(value).__name__,
                        "keys": list(value._fields), "items": items}
            return {"kind": "LIST", "items": items}
        name = "_".join(p for p in parts if p) or "sample"
        if not name[0].isalpha():
            name = "field_" + name
        name = name[:56]
        unique, n = name, 1
        while unique in names:
            unique, n = f"{name}_{n}", n + 1
        names.append(unique)
        return {"kind": "FIELD", "field": len(names) - 1}

    leaves(sample)  # refuses what cannot be carried, naming it
    return node(sample, []), names


def check_dtype(field):
    """SampleError unless the field's dtype can travel in a batch."""
    if field.dtype.name not in DTYPES:
        raise SampleError(f"{field.path or 'the sample'}: dtype {field.dtype} is not supported "
                          f"(one of {', '.join(DTYPES)}; convert it in the dataset)")


def write_sample(sample, fields, destinations):
    """Writes one sample's dense leaves into `destinations` (one array per
    dense field, of its shape and dtype) and returns its ragged leaves, in
    order, as C-contiguous arrays: SampleError naming the leaf when the
    sample's fields, shapes or dtypes are not the dataset's (its first
    sample's)."""
    arrays = _matching_arrays(sample, fields, "", "the dataset's first sample",
                              "every sample must agree (" + RESIZE_ADVICE + ")")
    dense = [array for field, array in zip(fields, arrays) if not field.ragged]
    for destination, array in zip(destinations, dense):
        destination[...] = array
    return [numpy.ascontiguousarray(array) for field, array in zip(fields, arrays)
            if field.ragged]


def describe_error(error):
    """One line for an exception: its type and message, and where the
    innermost frame of its traceback was (the user's code, usually)."""
    where = ""
    frames = traceback.extract_tb(error.__traceback__)
    if frames:
        last = frames[-1]
        where = f" (at {os.path.basename(last.filename)}:{last.lineno} in {last.name})"
    message = str(error).replace("\n", " ")
    return f"{type(error).__name__}: {message}{where}"[:1000]


def _ragged_leaves(dataset, names):
    """The indices of the leaves the dataset's `ragged_fields` names."""
    declared = getattr(dataset, "ragged_fields", ())
    if isinstance(declared, str) or not all(isinstance(n, str) for n in declared):
        raise DatasetLoadError("ragged_fields must be a list or tuple of field names, e.g. "
                               "('tokens',)")
    unknown = [n for n in declared if n not in names]
    if unknown:
        raise DatasetLoadError(f"ragged_fields names {unknown}, which are not fields of its "
                               f"samples; they are {names}")
    return {names.index(n) for n in declared}


def _renumber(node, wire_of_leaf):
    """`node` (a SampleNode's JSON) with each FIELD's leaf index replaced by
    that leaf's place on the wire."""
    if node["kind"] == "FIELD":
        return {"kind": "FIELD", "field": wire_of_leaf[node["field"]]}
    return {**node, "items": [_renumber(item, wire_of_leaf) for item in node["items"]]}


# Samples tried, from index 0, for one that describes the dataset.
DESCRIBE_ATTEMPTS = 16


# Samples a collate_fn is described with: a batch of two shows which
# dimension is the samples'.
DESCRIBE_BATCH = 2


def _first_samples(loaded, count):
    """The first `count` samples that can be made, from index 0 on, up to
    DESCRIBE_ATTEMPTS tried: at least one, else a DatasetLoadError saying
    why (an empty dataset, or the last sample's error)."""
    samples, last = [], None
    for index in range(min(len(loaded), DESCRIBE_ATTEMPTS)):
        try:
            samples.append(loaded.sample(0, 0, index))
        except Exception as error:  # the user's code: any exception
            last = error
        if len(samples) == count:
            return samples
    if samples:
        return samples
    if last is None:
        raise DatasetLoadError("the dataset is empty (len() is 0)")
    raise DatasetLoadError(f"none of its first {min(len(loaded), DESCRIBE_ATTEMPTS)} samples could "
                           f"be made; the last: {describe_error(last)}")


def _collated_description(loaded):
    """Fields, specs and structure of a dataset whose module has a
    collate_fn: those of its output for the first samples that can be made,
    each field collated (its shape is each batch's own)."""
    if getattr(loaded.dataset, "ragged_fields", ()):
        raise DatasetLoadError("ragged_fields and a collate_fn both say how to batch the samples; "
                               "the collate_fn makes the batch, so leave ragged_fields out")
    samples = _first_samples(loaded, DESCRIBE_BATCH)
    try:
        batch = loaded.collate_fn(samples)
    except Exception as error:  # the user's code: any exception
        raise DatasetLoadError(f"collate_fn raised on the first {len(samples)} samples: "
                               f"{describe_error(error)}") from error
    try:
        node, names = structure(batch)
    except SampleError as error:
        raise SampleError(f"collate_fn's batch: {error}") from error
    fields = [Field(path, array.dtype, array.shape, collated=True)
              for path, array in leaves(batch)]
    for field in fields:
        check_dtype(field)
    specs = [{"name": name, "dtype": "DTYPE_" + field.dtype.name.upper(),
              "shape": list(field.shape), "collated": True}
             for name, field in zip(names, fields)]
    return fields, specs, node


def _first_description(loaded):
    if loaded.collate_fn is not None:
        return _collated_description(loaded)
    sample = _first_samples(loaded, 1)[0]
    node, names = structure(sample)
    fields = describe(sample, _ragged_leaves(loaded.dataset, names))
    for field in fields:
        check_dtype(field)
    # On the wire the dense fields come first, then the ragged ones: a
    # batch's dense part is laid out before its samples' lengths are known.
    order = ([i for i, f in enumerate(fields) if not f.ragged]
             + [i for i, f in enumerate(fields) if f.ragged])
    specs = []
    for i in order:
        spec = {"name": names[i], "dtype": "DTYPE_" + fields[i].dtype.name.upper(),
                "shape": list(fields[i].shape)}
        if fields[i].ragged:
            spec["ragged"] = True
        specs.append(spec)
    return fields, specs, _renumber(node, {leaf: wire for wire, leaf in enumerate(order)})


class _Regions:
    """The server's batch memory this worker has mapped, by region id."""

    def __init__(self):
        self._maps = {}

    def add(self, region, fd):
        try:
            self._maps[region] = mmap.mmap(fd, 0)
        finally:
            os.close(fd)

    def forget(self, region):
        mapped = self._maps.pop(region, None)
        if mapped is not None:
            mapped.close()

    def get(self, region):
        return self._maps[region]


def _send(sock, message):
    sock.send(json.dumps(message).encode())


def serve(sock, spec, python_path):
    """The worker's life: load the dataset and describe it from its first
    sample that can be made (every worker does, so each knows the fields
    and the server can check that they agree), say hello, then make the
    samples the server asks for until it closes the socket."""
    try:
        loaded = load_dataset(spec, python_path)
        fields, specs, node = _first_description(loaded)
    except (DatasetLoadError, SampleError) as error:
        _send(sock, {"load_error": str(error)})
        return 2
    except Exception as error:  # len() raised, or something stranger
        _send(sock, {"load_error": describe_error(error)})
        return 2
    hello = {"num_samples": str(len(loaded)), "fields": specs, "structure": node}
    classes = getattr(loaded.dataset, "classes", None)
    if isinstance(classes, (list, tuple)) and all(isinstance(c, str) for c in classes):
        hello["class_names"] = list(classes)
    _send(sock, hello)
    regions = _Regions()
    collated = None  # the arrays of the batch last made, until written
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 1)
        except ConnectionResetError:
            return 0
        if not data:
            return 0  # the server closed: it stops, or replaces this worker
        task = json.loads(data)
        for region in task.get("forget", ()):
            regions.forget(int(region))
        region = int(task.get("region", 0))
        if fds:
            regions.add(region, fds[0])
        if task.get("batch"):
            made, collated = _make_batch(loaded, fields, task)
            _send(sock, made)
            continue
        if task.get("write_batch"):
            _send(sock, _write_batch(collated, task, regions.get(region)))
            collated = None
            continue
        collated = None
        error, ragged = _make_sample(loaded, fields, task, regions.get(region))
        if error:
            _send(sock, {"error": error})
            continue
        _send(sock, {"ragged_lengths": [len(array) for array in ragged],
                     "ragged_bytes": str(sum(array.nbytes for array in ragged))})
        for array in ragged:
            data = memoryview(array.reshape(-1).view(numpy.uint8))
            for start in range(0, len(data), SAMPLE_RECORD_BYTES):
                sock.send(data[start:start + SAMPLE_RECORD_BYTES])


def _make_sample(loaded, fields, task, memory):
    """Makes one sample and writes its dense fields; ("", its ragged
    arrays) when written, else (the error, None)."""
    try:
        sample = loaded.sample(int(task.get("seed", 0)), int(task.get("epoch", 0)),
                               int(task.get("index", 0)))
    except Exception as error:  # the user's code: any exception
        return describe_error(error), None
    offsets = [int(o) for o in task.get("offsets", ())]
    dense = [f for f in fields if not f.ragged]
    destinations = [numpy.ndarray(f.shape, f.dtype, buffer=memory, offset=o)
                    for f, o in zip(dense, offsets)]
    try:
        return "", write_sample(sample, fields, destinations)
    except SampleError as error:
        return f"SampleError: {error}", None


def collated_arrays(batch, fields):
    """The leaf arrays of a collate_fn's `batch`, one per field, after
    checking that it has the fields, dtypes and ranks it was described with
    (`fields`): else a SampleError naming the leaf."""
    found = leaves(batch)
    if [path for path, _ in found] != [field.path for field in fields]:
        raise SampleError(f"collate_fn returned fields {[path for path, _ in found]}, and "
                          f"{[field.path for field in fields]} for the first samples")
    for field, (path, array) in zip(fields, found):
        where = path or "the batch"
        if array.dtype != field.dtype:
            raise SampleError(f"collate_fn's {where}: dtype {array.dtype}, {field.dtype} for the "
                              "first samples")
        if array.ndim != len(field.shape):
            raise SampleError(f"collate_fn's {where}: shape {array.shape}, {field.shape} for the "
                              "first samples: its number of dimensions must not change")
        if any(extent >= 2**32 for extent in array.shape):
            raise SampleError(f"collate_fn's {where}: shape {array.shape} is too large")
    return [array for _, array in found]


def _make_batch(loaded, fields, task):
    """Makes the samples of a batch task (each slot's index, else its
    candidates in turn) and collates those made: (PythonBatchMade, the
    collated arrays, or None when it could not be collated)."""
    seed, epoch = int(task.get("seed", 0)), int(task.get("epoch", 0))
    samples, slots = [], []
    for slot in task["batch"]:
        errors, made = [], None
        for index in [int(slot.get("index", 0))] + [int(c) for c in slot.get("candidates", ())]:
            try:
                samples.append(loaded.sample(seed, epoch, index))
            except Exception as error:  # the user's code: any exception
                errors.append(describe_error(error))
                continue
            made = index
            break
        answer = {"made": made is not None, "index": str(made or 0)}
        if errors:
            answer["errors"] = errors
        slots.append(answer)
    if not samples:
        return {"error": "no sample of the batch could be made", "slots": slots}, None
    try:
        batch = loaded.collate_fn(samples)
    except Exception as error:  # the user's code: any exception
        return {"error": f"collate_fn raised {describe_error(error)}", "slots": slots}, None
    try:
        arrays = collated_arrays(batch, fields)
    except SampleError as error:
        return {"error": f"SampleError: {error}", "slots": slots}, None
    shapes = [{"dims": list(array.shape)} for array in arrays]
    return {"shapes": shapes, "slots": slots}, arrays


def _write_batch(arrays, task, memory):
    """Writes the collated `arrays` at the task's offsets: a
    PythonSampleResult."""
    if arrays is None:
        return {"error": "no collated batch to write (the server asked out of turn)"}
    offsets = [int(o) for o in task.get("offsets", ())]
    for array, offset in zip(arrays, offsets):
        if array.size:
            numpy.ndarray(array.shape, array.dtype, buffer=memory, offset=offset)[...] = array
    return {}


def _die_with_the_server():
    """Linux: a SIGKILL when the server that started this worker ends, however
    it ends, so that no worker outlives it (busy in user code, it would not
    see its socket close)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the server died before the prctl
        os._exit(1)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m heterodl.dataset_worker",
        description="A heterodl data server's worker process (started by `heterodl serve "
                    "--python-dataset`, not by hand).")
    parser.add_argument("--fd", type=int, required=True,
                        help="the SOCK_SEQPACKET socket to the server")
    parser.add_argument("--dataset", required=True, help="MODULE:CALLABLE")
    parser.add_argument("--python-path", action="append", default=[])
    args = parser.parse_args(argv)
    _die_with_the_server()
    sock = socket.socket(fileno=args.fd)
    try:
        if numpy is None:
            _send(sock, {"load_error": f"the workers' Python, {sys.executable}, cannot import "
                                       f"NumPy ({_NUMPY_MISSING}), which they need: install it "
                                       "there, or name another interpreter with --python"})
            return 2
        return serve(sock, args.dataset, args.python_path)
    finally:
        sock.close()


if __name__ == "__main__":
    sys.exit(main())
