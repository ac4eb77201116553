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

import dataclasses
import hashlib
import importlib
import numbers
import random
import struct
import sys
from collections.abc import Mapping, Sequence

import numpy


class DatasetLoadError(Exception):
    """The dataset module or callable could not be imported or called."""


class SampleError(Exception):
    """A sample the batch contract cannot carry."""


@dataclasses.dataclass(frozen=True)
class Field:
    """One leaf of a sample: its path from the sample's root, as Python
    would index it (`[0]`, `["boxes"]`), and its per-sample dtype and shape."""

    path: str
    dtype: numpy.dtype
    shape: tuple

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
    """Seeds Python's, NumPy's global and (when imported) torch's generators,
    as DataLoader's workers seed theirs."""
    random.seed(seed)
    numpy.random.seed(seed & 0xFFFFFFFF)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)


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


def describe(sample):
    """The fields a batch of samples shaped like this one has."""
    return [Field(path, array.dtype, array.shape) for path, array in leaves(sample)]


def collate_into(samples, fields, buffers):
    """Writes sample i's leaves into row i of each field's buffer (shape
    [len(samples), *field.shape], field.dtype). Every sample must have the
    fields `describe` gave for the first: a leaf missing, added, of another
    dtype or another shape is a SampleError naming it."""
    for i, sample in enumerate(samples):
        found = leaves(sample)
        if [path for path, _ in found] != [field.path for field in fields]:
            raise SampleError(
                f"sample {i} of the batch has fields {[path for path, _ in found]}, "
                f"the first sample {[field.path for field in fields]}")
        for field, (path, array) in zip(fields, found):
            where = path or "the sample"
            if array.shape != field.shape:
                raise SampleError(
                    f"{where}: shape {array.shape} in sample {i} of the batch, {field.shape} in "
                    "the first; samples of a batch must agree (resize in the dataset, or define "
                    "collate_fn in its module)")
            if array.dtype != field.dtype:
                raise SampleError(f"{where}: dtype {array.dtype} in sample {i} of the batch, "
                                  f"{field.dtype} in the first")
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
