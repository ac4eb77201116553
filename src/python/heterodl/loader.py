"""heterodl.RemoteDataLoader and what it returns (see heterodl/__init__.py)."""

import collections
import dataclasses
import functools
import importlib.util
import json
import logging
import numbers
import os
import sys
import warnings
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import _heterodl

FORMATS = ("torch", "numpy", "dlpack")

_LOG_LEVELS = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warning",
               logging.ERROR: "error"}


def set_log_level(level: Union[str, int]) -> None:
    """Which of heterodl's log lines (on stderr) are printed, process-wide:
    "debug", "info" (the default), "warning" or "error", or the `logging`
    module's level of the same name (e.g. `logging.WARNING`)."""
    if isinstance(level, numbers.Integral) and not isinstance(level, bool):
        if level not in _LOG_LEVELS:
            raise ValueError(f"log level {level} is not one of logging.DEBUG, INFO, WARNING, "
                             "ERROR")
        level = _LOG_LEVELS[level]
    if not isinstance(level, str):
        raise TypeError(f"log level must be a str or a logging level, not {type(level).__name__}")
    _heterodl._set_log_level(level.lower())


def _server_list(servers: Union[str, Sequence[str]], others_given: bool = False) -> List[str]:
    """The addresses in `servers`; none only when `others_given` (a servers
    file or a DNS name names them)."""
    if servers is None:
        if others_given:
            return []
        raise ValueError("no data servers: give servers, servers_file or servers_dns")
    if isinstance(servers, str):
        servers = servers.split(",")
    try:
        listed = [s.strip() for s in servers]
    except (TypeError, AttributeError):
        raise TypeError("servers must be 'host:port', 'host:port,host:port' or a list of "
                        f"them, not {type(servers).__name__}") from None
    listed = [s for s in listed if s]
    if not listed and not others_given:
        raise ValueError("servers names no data server (expected 'host:port', ...)")
    return listed


def _integer(name: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
    return int(value)


def _positive(name: str, value, unit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of {unit}, not {type(value).__name__}")
    if not value > 0:
        raise ValueError(f"{name} must be > 0 {unit}, got {value}")
    return float(value)


def _string(name: str, value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    return value


def _views_spec(views) -> str:
    """[(2, A), (8, B)] as the servers' spec of view groups: "2*A;8*B"."""
    if isinstance(views, (str, bytes)) or not isinstance(views, Sequence) or not views:
        raise TypeError("views must be a non-empty list of (count, pipeline) pairs")
    groups = []
    for group in views:
        if not isinstance(group, (tuple, list)) or len(group) != 2:
            raise TypeError(f"views: {group!r} is not a (count, pipeline) pair")
        count = _integer("views count", group[0], 1, 64)
        spec = _string("views pipeline", group[1])
        if ";" in spec or "*" in spec:
            raise ValueError(f"views: pipeline {spec!r} holds ';' or '*'")
        groups.append(f"{count}*{spec}")
    return ";".join(groups)


def shutdown_servers(servers: Union[str, Sequence[str]], reason: str = "training finished",
                     timeout: float = 10.0, auth_token: Optional[str] = None,
                     tls_ca: str = "", tls_cert: str = "", tls_key: str = "",
                     tls_server_name: str = "") -> None:
    """Tells data servers to shut down, as `heterodl train`'s leader does when
    training ends, so that the data group exits (and stops billing) now and
    not at its idle timeout. Waits up to `timeout` seconds for every server
    to acknowledge; a server that has gone already counts as stopped.
    ConnectionError names the servers that did not acknowledge."""
    _heterodl._shutdown_servers(_server_list(servers), str(reason),
                                _positive("timeout", timeout, "seconds"), auth_token, tls_ca,
                                tls_cert, tls_key, tls_server_name)


@dataclasses.dataclass
class Batch:
    """One batch of one rank. `images` is uint8 [B, H, W, 3] (RGB), `labels`
    and `indices` (the dataset indices the epoch's plan put here) int64 [B],
    as torch tensors, NumPy arrays or heterodl.Array (DLPack) objects, after
    the loader's `format`; none is a copy of the received memory.

    `fields` holds every field the servers' pipeline makes, by name: always
    "images"; for a segmentation dataset also "masks", the class ids of each
    image's pixels, [B, H, W], uint8 (int32 when the dataset's masks are
    16-bit), moved with their images by every geometric operation (`masks`
    is a shortcut, None without). A detection dataset's batches hold its
    objects: "boxes" float32 [N, 4] (xyxy in output pixels), "box_labels"
    int64 [N] (category ids) and "iscrowd" uint8 [N], the objects of all B
    samples one after another, and `lengths` says how many each sample has;
    `targets` is the per-sample list torchvision's detection models take,
    [{"boxes": float32 [n, 4], "labels": int64 [n], "iscrowd": uint8 [n]}],
    views of the same memory.

    A loader made with `views` (several views of each image) gets `views`:
    one uint8 array [B, count, H, W, 3] per group, in the order given (the
    fields "views_0", "views_1", ...); `images` is None.

    A batch unpacks as (images, labels), like a DataLoader's batch of an
    ImageFolder: `for images, labels in loader:`; a segmentation batch as
    (images, masks), a detection batch as (images, targets). len(batch) is
    B.

    A sample the servers could not read or decode never fails a batch: a
    deterministic other sample fills its slot (the same from any server),
    or, when those fail too, the slot is left unfilled: zeros, label -100
    (the ignore_index of torch's cross_entropy, so a loss skips it), its
    mask the servers' ignore index, no boxes. Per slot, `status` says which
    (uint8: 0 the planned sample, 1 replaced, 2 unfilled; `replaced` and
    `unfilled` as bool arrays), `sources` which dataset index the slot
    holds (`indices[i]`, the replacement's, or -1), and `failures` why each
    failed slot's sample failed, as the server said. `failed` counts them.
    The loader logs them as they come and stops the run past
    `max_failed_fraction` of an epoch."""

    images: Any
    labels: Any
    indices: Any
    failed: int = 0  # slots whose planned sample failed (replaced or unfilled)
    epoch: int = 0
    index: int = 0  # position of the batch in its rank's epoch
    # Slots whose image was decoded around damaged data (kept, as PIL and
    # torchvision keep it; a server run with --strict-decode replaces them).
    decoded_with_warnings: int = 0
    fields: Dict[str, Any] = dataclasses.field(default_factory=dict)
    # Ragged fields: how many elements each sample has.
    lengths: Dict[str, Tuple[int, ...]] = dataclasses.field(default_factory=dict)
    sources: Any = None
    status: Any = None
    failures: List[str] = dataclasses.field(default_factory=list)

    @property
    def replaced(self) -> Any:
        """bool [B]: slots a replacement fills (format "torch" or "numpy")."""
        return self.status == 1

    @property
    def unfilled(self) -> Any:
        """bool [B]: slots no sample could fill (format "torch" or "numpy")."""
        return self.status == 2

    @property
    def masks(self) -> Any:
        return self.fields.get("masks")

    @property
    def targets(self) -> Optional[List[Dict[str, Any]]]:
        """A detection batch's objects per sample; None for other batches.
        Needs format "torch" or "numpy" (slices of heterodl.Array are not
        arrays)."""
        if "boxes" not in self.fields:
            return None
        targets = []
        start = 0
        for count in self.lengths["boxes"]:
            end = start + count
            targets.append({"boxes": self.fields["boxes"][start:end],
                            "labels": self.fields["box_labels"][start:end],
                            "iscrowd": self.fields["iscrowd"][start:end]})
            start = end
        return targets

    @property
    def views(self) -> Optional[List[Any]]:
        """A multi-view batch's groups of views; None for other batches."""
        if "views_0" not in self.fields:
            return None
        return [self.fields[f"views_{g}"] for g in range(len(self.fields))
                if f"views_{g}" in self.fields]

    def __iter__(self) -> Iterator[Any]:
        if "views_0" in self.fields:
            return iter((self.views, self.labels))
        if "masks" in self.fields:
            return iter((self.images, self.fields["masks"]))
        if "boxes" in self.fields:
            return iter((self.images, self.targets))
        return iter((self.images, self.labels))

    def __len__(self) -> int:
        return len(self.labels)


class _DistributedSamplerView:
    """`loader.sampler`: this rank's share of each epoch, described as PyTorch's
    `DistributedSampler` describes it, so that code and frameworks written for
    a DataLoader over one (DDP loops, PyTorch Lightning) find what they ask
    for. The servers hold the plan; this object only reports it and
    forwards `set_epoch`.

    Attributes (read-only): `num_replicas` and `rank` (the loader's
    world_size and rank), `epoch` (what the next iteration runs), `shuffle`,
    `seed`, `drop_last`, `num_samples` (this rank's samples per epoch, also
    `len(sampler)`), `total_size` (num_samples x num_replicas: the padded or
    cut epoch) and `dataset` (the loader's)."""

    def __init__(self, loader: "RemoteDataLoader", samples_per_rank: int):
        self._loader = loader
        self.num_samples = samples_per_rank
        self.num_replicas = loader.world_size
        self.rank = loader.rank
        self.total_size = samples_per_rank * loader.world_size
        self.shuffle = loader.shuffle
        self.seed = loader.seed
        self.drop_last = loader.drop_last
        self.dataset = loader.dataset

    @property
    def epoch(self) -> int:
        return self._loader.epoch

    def set_epoch(self, epoch: int) -> None:
        """The loader's set_epoch(epoch): a resume position pending for this
        epoch is kept."""
        self._loader.set_epoch(epoch)

    def __len__(self) -> int:
        return self.num_samples


class _RemoteDataset:
    """`loader.dataset`: the served dataset, as a map-style dataset. `len()` is
    its size (all ranks together), `classes` and `class_to_idx` name its
    labels as an ImageFolder's do, and `dataset[i]` builds sample i on a
    server: (image, label) after the loader's pipeline, with the randomness
    of epoch 0, in the loader's format. Each `dataset[i]` is a round trip to
    a server (tens of milliseconds): it is there to look at samples, not to
    train from."""

    def __init__(self, loader: "RemoteDataLoader", num_samples: int, classes: List[str]):
        self._loader = loader
        self._num_samples = num_samples
        self.classes = classes
        self.class_to_idx = {name: i for i, name in enumerate(classes)}

    def __len__(self) -> int:
        return self._num_samples

    def __getitem__(self, index: int) -> Tuple[Any, Any]:
        if isinstance(index, bool) or not isinstance(index, numbers.Integral):
            raise TypeError(f"dataset indices must be integers, not {type(index).__name__}")
        position = index + self._num_samples if index < 0 else int(index)
        if not 0 <= position < self._num_samples:
            raise IndexError(f"dataset index {index} out of range for {self._num_samples} "
                             "samples")
        batch = self._loader._sample_batch(position)
        return batch.images[0], batch.labels[0]


class _PinnedCopyGuard:
    """Keeps a pinned batch's memory from going back to the loader while a
    copy the trainer started from it may still be running.

    `.to(device, non_blocking=True)` from pinned memory returns before the
    copy is done, and the trainer usually drops the batch at once: its
    memory would go back to the loader's pool and be written by the next
    received batch under the copy. By the time the trainer asks for the next
    batch it has enqueued every copy of this one on its current stream, so an
    event recorded then marks when they are done; the batch is held until it
    has passed."""

    def __init__(self, torch_module):
        self._torch = torch_module
        self._last = None
        self._pending: Deque[Tuple[Any, Any]] = collections.deque()

    def next_requested(self) -> None:
        if self._last is not None:
            event = self._torch.cuda.Event()
            event.record()
            self._pending.append((self._last, event))
            self._last = None
        while self._pending and self._pending[0][1].query():
            self._pending.popleft()

    def delivered(self, arrays) -> None:
        self._last = arrays


class _EpochIterator:
    """One iteration over an epoch. An iterator object, not a generator: an
    exception in next() (Ctrl-C, a stall) leaves it usable, and the next
    call goes on where that one stopped. `start` runs at the first next(),
    not at iter(): frameworks call iter() only to check that a loader is
    iterable (Lightning does, before it restores a checkpoint), and that
    must not use up a resume position. `start` returns the C++ loader to
    read (the epoch's plan is known only then: a checkpoint restored after
    iter() may be from another world size)."""

    def __init__(self, loader, importer: Callable[[Any], Any],
                 copy_guard: Optional[_PinnedCopyGuard],
                 start: Optional[Callable[[], Any]] = None,
                 on_batch: Optional[Callable[[Batch], None]] = None, structured: bool = True):
        self._loader = loader
        self._import = importer
        self._copy_guard = copy_guard
        self._start = start
        self._first_index = 0  # what the loader's batch numbers start at
        self._on_batch = on_batch
        structure = loader.sample_structure() if structured else None
        self._structure = None if structure is None else json.loads(structure)

    def __iter__(self) -> "_EpochIterator":
        return self

    def __next__(self) -> Batch:
        if self._start is not None:
            start, self._start = self._start, None
            self._loader, self._first_index = start()
        guard = self._copy_guard
        if guard is not None:
            guard.next_requested()
        received = self._loader.next()
        if received is None:
            raise StopIteration
        arrays = received["fields"]
        if guard is not None:
            guard.delivered(received)
        fields = {name: self._import(array) for name, array in arrays.items()}
        lengths = received["lengths"]
        batch = Batch(fields.get("images"), self._import(received["labels"]),
                      self._import(received["indices"]), received["failed"], received["epoch"],
                      self._first_index + received["index"], received["decoded_with_warnings"],
                      fields, lengths,
                      self._import(received["sources"]), self._import(received["status"]),
                      received["failures"])
        if self._on_batch is not None:
            self._on_batch(batch)
        if self._structure is not None:
            # A user's own dataset: its batch as default_collate makes it,
            # a ragged field as the list of its samples' arrays.
            columns = [_split(array, lengths[name]) if name in lengths else array
                       for name, array in fields.items()]
            return _rebuild(self._structure, columns)
        if "views_0" in fields:
            batch.images = None  # a multi-view batch has no images: its views are the fields
        return batch


@functools.lru_cache(maxsize=64)
def _namedtuple(name: str, keys: Tuple[str, ...]):
    return collections.namedtuple(name, keys)


def _split(elements: Any, lengths: Tuple[int, ...]) -> List[Any]:
    """A ragged field's elements of all samples, as one array per sample
    (views of the same memory)."""
    if not hasattr(elements, "__getitem__"):
        raise TypeError("a ragged field is a list of arrays: read it with format='torch' or "
                        "'numpy' (slices of heterodl.Array are not arrays)")
    arrays = []
    start = 0
    for count in lengths:
        arrays.append(elements[start:start + count])
        start += count
    return arrays


def _as_namedtuple(type_name: str, keys: Tuple[str, ...], items: List[Any]) -> Any:
    return _namedtuple(type_name, keys)(*items)


def _rebuild(node: Dict[str, Any], columns: List[Any],
             named: Callable[[str, Tuple[str, ...], List[Any]], Any] = _as_namedtuple,
             sequence: Callable[[List[Any]], Any] = list) -> Any:
    """A batch in its samples' structure (data_service.proto's SampleNode,
    as protobuf's JSON prints it: defaults left out), each leaf its field's
    column: dicts as they are, namedtuples as `named(type name, keys,
    items)` makes them, tuples and lists as `sequence(items)` does; by
    default as torch's default_collate returns them (namedtuples, lists)."""
    kind = node.get("kind", "FIELD")
    if kind == "FIELD":
        return columns[int(node.get("field", 0))]
    items = [_rebuild(item, columns, named, sequence) for item in node.get("items", ())]
    keys = tuple(node.get("keys", ()))
    if kind == "DICT":
        return dict(zip(keys, items))
    if kind == "NAMEDTUPLE":
        return named(node.get("typeName", "Sample"), keys, items)
    return sequence(items)


def _default_format() -> str:
    if importlib.util.find_spec("torch") is not None:
        return "torch"
    if importlib.util.find_spec("numpy") is not None:
        return "numpy"
    return "dlpack"


def _importer(format: str) -> Callable[[Any], Any]:
    """How an Array becomes the caller's array type, without a copy."""
    if format == "torch":
        import torch
        return torch.from_dlpack
    if format == "numpy":
        import numpy
        return numpy.asarray  # the buffer protocol: any NumPy, no copy
    return lambda array: array


def _tf_config_rank() -> Optional[Tuple[int, int]]:
    """(rank, world size) from $TF_CONFIG, TensorFlow's
    MultiWorkerMirroredStrategy cluster: the chief (if any) is rank 0, then
    the workers in order; None without one, or for a task that trains on no
    data (an evaluator, a parameter server)."""
    text = os.environ.get("TF_CONFIG")
    if not text:
        return None
    try:
        config = json.loads(text)
        cluster, task = config["cluster"], config["task"]
        members = [("chief", i) for i in range(len(cluster.get("chief", ())))]
        members += [("worker", i) for i in range(len(cluster.get("worker", ())))]
        me = (task["type"], int(task["index"]))
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"TF_CONFIG is not a TensorFlow cluster description ({error}): "
                         f"{text[:200]!r}") from None
    if me not in members:
        return None
    return members.index(me), len(members)


def _distributed_defaults() -> Tuple[int, int]:
    """(rank, world size) of the job this process is in: torch.distributed's
    when it is initialized, else torchrun's environment, TensorFlow's
    TF_CONFIG, Horovod's or Open MPI's, or Slurm's, else one process."""
    # A script that initialized torch.distributed imported it: a NumPy or JAX
    # user's process is not made to import torch to find that it did not.
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if "RANK" not in os.environ:
        from_tf_config = _tf_config_rank()
        if from_tf_config is not None:
            return from_tf_config
    for rank_name, size_name in (("RANK", "WORLD_SIZE"), ("HOROVOD_RANK", "HOROVOD_SIZE"),
                                 ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                                 ("SLURM_PROCID", "SLURM_NTASKS")):
        if rank_name in os.environ and size_name in os.environ:
            try:
                return int(os.environ[rank_name]), int(os.environ[size_name])
            except ValueError:
                raise ValueError(f"{rank_name}={os.environ[rank_name]!r} and {size_name}="
                                 f"{os.environ[size_name]!r} are not integers") from None
    return 0, 1


# The version of RemoteDataLoader.state_dict()'s dict.
_STATE_VERSION = 1
# What a state's position is a position in: a state that differs from the
# loader in any of these has another epoch permutation. (Its world size and
# batch size may differ: the rest of its epoch is re-split.)
_PLAN_KEYS = ("fingerprint", "num_samples", "seed", "drop_last", "shuffle",
              "shuffle_block_shards")
# What a state written before a key existed meant by its absence.
_PLAN_DEFAULTS = {"shuffle_block_shards": 0, "epoch_offset": 0, "first_batch": 0}


def _samples_consumed(state: Dict[str, Any]) -> int:
    """Entries of the epoch's permutation that every rank of `state`'s plan
    had read at its position: src/plan/epoch_plan.h's SamplesConsumed. Only a
    rank's last batch is short, so before it each of world_size ranks read
    whole batches; past the dataset's size they read the padding. A rest's
    batches (see _EpochRest) are counted from its first_batch."""
    if state["next_batch"] >= state["batches_per_epoch"]:
        return state["num_samples"]
    read = (state["next_batch"] - state["first_batch"]) * state["batch_size"] * state["world_size"]
    return min(state["num_samples"], state["epoch_offset"] + read)


@dataclasses.dataclass
class _EpochRest:
    """The rest of an epoch that a checkpoint of another world size or batch
    size left unread, as this loader's ranks split it: a C++ Loader whose
    plan leaves out the `offset` samples of the epoch's permutation read
    before. Its batches are numbered on from `first` (the batches the
    trainer had counted in the epoch), so that a trainer's own step count
    within the epoch (Lightning's, Hugging Face's) runs on to len(loader)."""

    epoch: int
    offset: int
    first: int
    loader: Any


def _check_state(state: Any, mine: Dict[str, Any]) -> Dict[str, Any]:
    """`state` (given to load_state_dict), a state_dict() of the epoch
    permutation `mine` (the loader's own state_dict()) describes, with what
    it leaves out taken as `mine`'s (a hand-made position); raises
    TypeError for what is not a dict, ValueError naming each key that
    differs and each value that is no position."""
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict from state_dict(), not {type(state).__name__}")
    missing = [key for key in ("version", "epoch", "next_batch") if key not in state]
    if missing or state["version"] != _STATE_VERSION:
        raise ValueError("not a RemoteDataLoader state_dict() (missing "
                         f"{', '.join(missing) or 'a known version'})")
    full = {**mine, **_PLAN_DEFAULTS, **state}
    differs = [f"{key} {full[key]!r} (this loader: {mine[key]!r})"
               for key in _PLAN_KEYS if full[key] != mine[key]]
    if differs:
        raise ValueError("the state is a position in another epoch plan: " + ", ".join(differs))
    for key, low in (("epoch", 0), ("world_size", 1), ("batch_size", 1),
                     ("batches_per_epoch", 0), ("next_batch", 0), ("epoch_offset", 0),
                     ("first_batch", 0)):
        value = full[key]
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
            raise ValueError(f"the state's {key} {value!r} is not an integer >= {low}")
    if not full["first_batch"] <= full["next_batch"] <= full["batches_per_epoch"]:
        raise ValueError(f"the state's next_batch {full['next_batch']} is outside its epoch's "
                         f"batches [{full['first_batch']}, {full['batches_per_epoch']}]")
    if full["epoch_offset"] >= full["num_samples"]:
        raise ValueError(f"the state's epoch_offset {full['epoch_offset']} is past the "
                         "dataset's end")
    return full


class RemoteDataLoader:
    """Batches of one rank from heterodl data servers, in order: a drop-in for a
    `torch.utils.data.DataLoader` over the same samples.

    Iterating runs the epoch set by `set_epoch()` (shuffled as PyTorch's
    `DistributedSampler` would, split across `world_size` ranks) from its
    start, or from where `resume()` or `load_state_dict()` says. Every sample
    of an epoch reaches its rank exactly once, through server failures and
    through a checkpoint and resume. Batches are `Batch` objects that unpack
    as (images, labels).

    Code written for a DataLoader keeps working: `len(loader)` is the
    batches per epoch, `loader.sampler.set_epoch(e)` (what DDP loops and
    PyTorch Lightning call) sets the epoch, `loader.dataset` is a map-style
    dataset, and `state_dict()` / `load_state_dict()` are torchdata's
    `StatefulDataLoader` protocol, which Lightning and torchtitan use for
    mid-epoch checkpoints.

    Resuming. `resume(epoch, next_batch)` (or `load_state_dict`) sets a
    position that the next iteration starts from, and `set_epoch(epoch)` of
    that same epoch keeps it: the usual loop

        loader.load_state_dict(checkpoint["loader"])    # or loader.resume(e, b)
        for epoch in range(checkpoint["epoch"], epochs):
            loader.sampler.set_epoch(epoch)
            for images, labels in loader: ...

    continues at the saved batch, then runs the next epochs whole. A
    position at the end of an epoch runs nothing more of it. set_epoch() of
    another epoch drops the position (with a warning when it was inside its
    epoch).

    Args:
        servers: the data servers, "host:port", "host:port,host:port" or a
            list of them: each server's service port, the one
            `heterodl serve` logs as "listening on". Any server can build any
            batch. May be None when servers_file or servers_dns names them.
        batch_size: samples per batch for this rank.
        servers_file: a file of data servers (one "host:port" per line),
            re-read while the loader runs: servers added start getting
            batches within seconds, servers removed hand theirs to the
            others. Rewrite it by renaming a new file over it.
        servers_dns: "name:port", a DNS name whose every address is a data
            server (a Kubernetes headless Service), re-resolved likewise.
        pipeline: the augmentation pipeline the servers run, e.g.
            "random_resized_crop(224)|hflip(0.5)"; "" is the servers'
            default. One the servers cannot parse is a ValueError here.
        views: several views of each image instead of one image, as
            multi-crop self-supervised recipes take them: a list of
            (count, pipeline), e.g. [(2, "random_resized_crop(224,
            scale=0.4:1)|hflip(0.5)"), (8, "random_resized_crop(96,
            scale=0.05:0.4)|hflip(0.5)")]. Each image is decoded once for
            all its views; every view draws its own randomness. Batches
            then have `views`, one uint8 [B, count, H, W, 3] per group
            (docs/pipeline.md, "Views"). Not with `pipeline`.
        rank: this rank, in [0, world_size). Default: torch.distributed's
            rank when it is initialized, else $RANK (torchrun) or
            $SLURM_PROCID, else 0.
        world_size: how many ranks share each epoch (default likewise).
        seed: seeds the shuffle and the augmentations (same seed, same
            batches, bit for bit, whichever server builds them).
        drop_last: drop the samples that do not fill the last batch of each
            rank's share (and, as DistributedSampler's drop_last does, the
            tail that does not divide evenly across ranks).
        shuffle: False reads every epoch in dataset order (evaluation).
        shuffle_block_shards: > 0 shuffles in blocks, for a dataset of tar
            shards or TFRecord files read from object storage: the shards
            are permuted and samples shuffled within windows of this many
            shards, so that servers fetch whole chunks of few shards instead
            of a request per sample (docs/object_storage.md). Each sample
            still once per epoch; a dataset of no shards is refused.
        max_buffered_mb: memory for batches fetched ahead of the trainer.
        connections_per_server: TCP connections to each server.
        connect_timeout: seconds to wait for servers that are not up yet
            (why one does not answer is logged at once; an address that
            answers as something other than a data server fails at once).
        stall_timeout: seconds with no batch from any server before
            iteration raises TimeoutError.
        auth_token: the servers' shared token (their --auth-token-file).
        pin_memory: receive pixels into pinned (page-locked) memory, so a
            copy to the GPU is asynchronous. Default: True when `format` is
            "torch" and torch sees CUDA. The CUDA runtime is loaded at run
            time (torch's when torch is imported); pinned under torch's
            current device, so call torch.cuda.set_device(local_rank) first.
        format: what batches hold: "torch" tensors (the default when torch
            is installed), "numpy" arrays (the default otherwise; also what
            JAX takes), or "dlpack": heterodl.Array objects, which any
            DLPack or buffer-protocol consumer imports without a copy.
        tls_ca, tls_cert, tls_key, tls_server_name: TLS to the servers
            (docs/operations.md).
        pixel_channel: receive pixels on the servers' pixel channels (not
            under TLS); False sends them through gRPC.
        max_failed_fraction: a sample the servers cannot read or decode is
            replaced in its batch and logged (with the server's reason,
            rate-limited); once more than this share of an epoch's samples
            of this rank have failed, iteration raises RuntimeError naming
            the dataset, rather than train on replacements (default 0.05;
            1 never raises).
        epochs: the number of epochs the run reads (epochs 0 to epochs-1),
            when known: nothing past the last one's end is fetched. By
            default the loader fetches the next epoch's first batches while
            an epoch ends, which a run's last epoch does for nothing
            (stats()'s held_ahead and in_flight count them).
        metrics_port: serve Prometheus metrics of this rank's data feed at
            http://0.0.0.0:PORT/metrics (0: any free port, then see
            `metrics_port`): steps, the time each waited for its batch,
            stall, delivered samples, and the data hosts needed, as
            `heterodl train --metrics-port` serves them (docs/operations.md,
            "Monitoring"). A step is the time between two batches the loop
            takes. Give it on one rank (rank 0), or a port per rank.
            Default None: off.

    Attributes (read-only):
        batch_size, drop_last, shuffle, seed, rank, world_size, pin_memory:
            as given (rank and world_size as resolved).
        format: "torch", "numpy" or "dlpack", as given or defaulted.
        epoch: the epoch the next iteration runs.
        dataset: the served dataset (`len`, `classes`, `class_to_idx`,
            `dataset[i]`; see _RemoteDataset).
        sampler: this rank's share, as a DistributedSampler describes it
            (`len(sampler)` is this rank's samples per epoch; see
            _DistributedSamplerView).
        class_names: the dataset's class names (its label i is
            class_names[i]); the same list as dataset.classes.
        num_samples: samples in the dataset, all ranks together.
        servers: the data servers in use now.
        metrics_port: the port serving Prometheus metrics, or None.
        last_batch: the Batch the last iteration step came from (for a
            user's own Python dataset, whose steps are its collated
            structure: that batch's indices, sources, status, failures).
        batch_sampler, collate_fn, worker_init_fn, generator,
        prefetch_factor, multiprocessing_context: None, and num_workers 0,
        persistent_workers False, timeout 0: what a DataLoader that does
            its own work in its own process reports; frameworks read them.
    """

    # What a DataLoader reports when it has no workers and no hooks; the
    # loader's work happens on the servers.
    num_workers = 0
    persistent_workers = False
    prefetch_factor = None
    batch_sampler = None
    collate_fn = None
    worker_init_fn = None
    generator = None
    multiprocessing_context = None
    timeout = 0


    def __init__(self, servers: Union[str, Sequence[str], None] = None,
                 batch_size: Optional[int] = None, pipeline: str = "",
                 rank: Optional[int] = None, world_size: Optional[int] = None, seed: int = 0,
                 drop_last: bool = False, shuffle: bool = True, max_buffered_mb: float = 1024.0,
                 connections_per_server: int = 2, connect_timeout: float = 60.0,
                 stall_timeout: float = 60.0, auth_token: Optional[str] = None,
                 pin_memory: Optional[bool] = None, format: Optional[str] = None,
                 tls_ca: str = "", tls_cert: str = "", tls_key: str = "",
                 tls_server_name: str = "", pixel_channel: bool = True,
                 servers_file: str = "", servers_dns: str = "",
                 views: Optional[Sequence[Tuple[int, str]]] = None,
                 metrics_port: Optional[int] = None, max_failed_fraction: float = 0.05,
                 epochs: Optional[int] = None, shuffle_block_shards: int = 0):
        servers_file = os.fspath(servers_file)
        servers_file = _string("servers_file", servers_file)
        servers_dns = _string("servers_dns", servers_dns)
        self._servers = _server_list(servers, bool(servers_file or servers_dns))
        if batch_size is None:
            raise TypeError("RemoteDataLoader() needs batch_size")
        if rank is None or world_size is None:
            default_rank, default_world_size = _distributed_defaults()
            rank = default_rank if rank is None else rank
            world_size = default_world_size if world_size is None else world_size
        world_size = _integer("world_size", world_size, 1, 1 << 20)
        rank = _integer("rank", rank, 0, world_size - 1)
        pipeline = _string("pipeline", pipeline)
        if views is not None:
            if pipeline:
                raise ValueError("give pipeline or views, not both")
            pipeline = _views_spec(views)
        if auth_token is not None and not isinstance(auth_token, str):
            raise TypeError("auth_token must be a str or None")
        format = _default_format() if format is None else _string("format", format)
        if format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {format!r}")
        self._format = format
        self._import = _importer(format)
        pin_device = 0
        self._copy_guard: Optional[_PinnedCopyGuard] = None
        if format == "torch":
            import torch
            if pin_memory is None:
                pin_memory = torch.cuda.is_available()
            if pin_memory:
                if not torch.cuda.is_available():
                    raise ValueError("pin_memory=True needs CUDA, and torch sees no CUDA device")
                pin_device = torch.cuda.current_device()
                self._copy_guard = _PinnedCopyGuard(torch)
        self._auth_token = auth_token
        self._tls = (_string("tls_ca", tls_ca), _string("tls_cert", tls_cert),
                     _string("tls_key", tls_key), _string("tls_server_name", tls_server_name))
        self.batch_size = _integer("batch_size", batch_size, 1, 65536)
        self.seed = _integer("seed", seed, 0, (1 << 64) - 1)
        self.drop_last = bool(drop_last)
        self.shuffle = bool(shuffle)
        self.shuffle_block_shards = _integer("shuffle_block_shards", shuffle_block_shards, 0,
                                             1 << 16)
        self.rank = rank
        self.world_size = world_size
        self.pin_memory = bool(pin_memory)
        if isinstance(max_failed_fraction, bool) or not isinstance(max_failed_fraction,
                                                                     numbers.Real):
            raise TypeError("max_failed_fraction must be a number in [0, 1]")
        if not 0 <= max_failed_fraction <= 1:
            raise ValueError(f"max_failed_fraction must be in [0, 1], got {max_failed_fraction}")
        # What every connection of this loader shares (dataset[i]'s own
        # included): the C++ Loader's options by name.
        self._connection = dict(
            servers=self._servers, pipeline=pipeline, seed=self.seed,
            connect_timeout=_positive("connect_timeout", connect_timeout, "seconds"),
            stall_timeout=_positive("stall_timeout", stall_timeout, "seconds"),
            pixel_channel=bool(pixel_channel), servers_file=servers_file,
            servers_dns=servers_dns, auth_token=auth_token, tls_ca=self._tls[0],
            tls_cert=self._tls[1], tls_key=self._tls[2], tls_server_name=self._tls[3],
            max_failed_fraction=float(max_failed_fraction))
        self._epoch = 0
        # A resume position no iteration has started from yet: a batch of
        # the plan of the loader that runs its epoch (see _plan_of).
        self._pending: Optional[Tuple[int, int]] = None
        # The epoch a checkpoint of another world size or batch size left
        # unfinished (load_state_dict) runs from its own C++ Loader.
        self._rest: Optional[_EpochRest] = None
        self.last_batch: Optional[Batch] = None
        # The plan and feed of this loader's C++ Loader (a rest's too).
        self._plan_options = dict(
            batch_size=self.batch_size, rank=rank, world_size=world_size, shuffle=self.shuffle,
            shuffle_block_shards=self.shuffle_block_shards, drop_last=self.drop_last,
            max_buffered_mb=_positive("max_buffered_mb", max_buffered_mb, "MB"),
            connections_per_server=_integer("connections_per_server", connections_per_server, 1,
                                            16),
            pin_memory=self.pin_memory, pin_device=pin_device,
            epochs=0 if epochs is None else _integer("epochs", epochs, 1, 1 << 20))
        self._loader = self._connect(
            metrics_port=-1 if metrics_port is None else _integer("metrics_port", metrics_port,
                                                                  0, 65535),
            **self._plan_options)
        self._sample_loader = None  # dataset[i]'s, made on first use
        self.dataset = _RemoteDataset(self, self._loader.num_samples(),
                                      self._loader.class_names())
        self.sampler = _DistributedSamplerView(self, self._loader.samples_per_rank())

    def _connect(self, **options):
        """A C++ Loader with this loader's shared options and `options`."""
        return _heterodl.Loader({**self._connection, **options})

    def _sample_batch(self, index: int, structured: bool = True) -> Batch:
        """A batch holding sample `index` alone, built by a server: batch
        `index` of an unshuffled one-rank plan of batches of 1 (for a user's
        Python dataset, its structure unless not `structured`)."""
        if self._sample_loader is None:
            self._sample_loader = self._connect(batch_size=1, rank=0, world_size=1,
                                                shuffle=False, drop_last=False,
                                                max_buffered_mb=1.0, connections_per_server=1,
                                                max_failed_fraction=1.0)
        self._sample_loader.set_epoch(0, index)
        return next(_EpochIterator(self._sample_loader, self._import, None,
                                   structured=structured))

    def _plan_of(self, epoch: int) -> Tuple[Any, int]:
        """(the C++ Loader whose plan `epoch` runs, the number of its first
        batch): the rest's for the epoch a checkpoint of another world size
        left unfinished, else (this loader's, 0)."""
        if self._rest is not None and self._rest.epoch == epoch:
            return self._rest.loader, self._rest.first
        return self._loader, 0

    @property
    def epoch(self) -> int:
        """The epoch the next iteration runs."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration runs (it changes the shuffle). A
        resume position pending for this epoch (from resume() or
        load_state_dict()) is kept; one for another epoch is dropped. The
        first batches are fetched at once, while the caller does whatever
        comes before iterating."""
        epoch = _integer("epoch", epoch, 0, (1 << 32) - 1)
        if self._pending is not None:
            pending_epoch, next_batch = self._pending
            if pending_epoch == epoch:
                return
            ends_previous = next_batch >= len(self) and epoch == pending_epoch + 1
            if next_batch > 0 and not ends_previous:
                warnings.warn(
                    f"set_epoch({epoch}) drops the resume position (epoch {pending_epoch}, "
                    f"batch {next_batch}) that no iteration has used: epoch {epoch} starts "
                    "from its first batch", RuntimeWarning, stacklevel=2)
            self._pending = None
        if self._rest is not None and self._rest.epoch != epoch:
            self._leave_rest()
        self._epoch = epoch
        self._plan_of(epoch)[0].set_epoch(epoch, 0)

    def _leave_rest(self) -> None:
        """Back to this loader's own plan; warns when the rest's epoch was
        left before its end (a trainer that counted fewer batches in it than
        it has: see heterodl.lightning.EpochLength)."""
        rest, self._rest = self._rest, None
        epoch, next_batch = rest.loader.position()
        left = len(rest.loader) - next_batch
        if epoch == rest.epoch and 0 < next_batch and left > 0:
            warnings.warn(
                f"epoch {rest.epoch}, resumed from a checkpoint of another world size, was left "
                f"with {left} of its batches not read: their samples miss that epoch. A trainer "
                "that measured the epoch's length before loading the checkpoint stops early "
                "(Lightning: add heterodl.lightning.EpochLength() to the Trainer's callbacks)",
                RuntimeWarning, stacklevel=3)

    def resume(self, epoch: int, next_batch: int) -> None:
        """The next iteration starts at batch `next_batch` of `epoch` (a
        checkpoint's `position()`); set_epoch(epoch) before it keeps this.
        next_batch == len(loader) means the epoch is done: iterating it
        gives nothing more, and the next set_epoch moves on."""
        epoch = _integer("epoch", epoch, 0, (1 << 32) - 1)
        self._rest = None  # a batch number of this loader's own plan
        next_batch = _integer("next_batch", next_batch, 0, len(self))
        self._loader.set_epoch(epoch, next_batch)
        self._epoch = epoch
        self._pending = (epoch, next_batch)

    def position(self) -> Tuple[int, int]:
        """(epoch, next batch): what to save in a checkpoint and pass to
        resume(). Inside an iteration, the batch after the last one
        delivered; after it, (epoch, len(loader))."""
        if self._pending is not None:
            return self._pending
        loader, first = self._plan_of(self._epoch)
        epoch, next_batch = loader.position()
        return epoch, first + next_batch

    def state_dict(self) -> Dict[str, Any]:
        """The loader's position, and what it is a position in, as a dict of
        plain values (torch.save and JSON take it): torchdata's
        StatefulDataLoader protocol. Every rank of a step has the same
        position, so rank 0's state resumes every rank, at this world size
        and batch size or another (load_state_dict).

        `samples_consumed` is how far the epoch's permutation has been read
        by all ranks together; `epoch_offset` is where this epoch's plan
        began in it (0 unless the epoch is the rest of one begun at another
        world size)."""
        return self._state_at(*self.position())

    def _state_at(self, epoch: int, next_batch: int) -> Dict[str, Any]:
        """state_dict() as it would be at batch `next_batch` of `epoch` (an
        epoch this loader runs or ran: a consumer that holds batches ahead,
        such as a tf.data pipeline, checkpoints where its model stands)."""
        loader, first = self._plan_of(epoch)
        state = {"version": _STATE_VERSION, "epoch": epoch, "next_batch": next_batch,
                 "batches_per_epoch": first + len(loader), "num_samples": self.num_samples,
                 "fingerprint": self._loader.fingerprint(), "seed": self.seed,
                 "world_size": self.world_size, "batch_size": self.batch_size,
                 "drop_last": self.drop_last, "shuffle": self.shuffle,
                 "shuffle_block_shards": self.shuffle_block_shards,
                 "epoch_offset": 0, "first_batch": first}
        if self._rest is not None and self._rest.epoch == epoch:
            state["epoch_offset"] = self._rest.offset
        state["samples_consumed"] = _samples_consumed(state)
        return state

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Resumes from a state_dict(): the next iteration starts where that
        one stood (see resume()).

        The state may come from another world size or batch size (a job
        resumed on more or fewer GPUs): the samples of its epoch that its
        ranks had not read yet are split over this loader's ranks as
        DistributedSampler splits an epoch (padded by repeating their head to
        divide evenly, or cut with drop_last) and reach them exactly once, in
        batches of this loader's batch_size; the next epochs are this
        loader's own plan. Keep the global batch (batch_size x world_size)
        or the per-rank one, as the training recipe wants; every rank must
        load the same state.

        ValueError when the state is from another epoch permutation (dataset,
        seed, drop_last, shuffle or shuffle_block_shards differ), naming
        what differs."""
        state = _check_state(state, self.state_dict())
        epoch, next_batch = state["epoch"], state["next_batch"]
        if (state["world_size"] == self.world_size and state["batch_size"] == self.batch_size
                and state["epoch_offset"] == 0):
            self.resume(epoch, next_batch)
            return
        consumed = _samples_consumed(state)
        self._rest = None
        if consumed == 0 or consumed >= self.num_samples:
            self.resume(epoch, 0 if consumed == 0 else len(self))
            return
        epoch = _integer("epoch", epoch, 0, (1 << 32) - 1)
        rest = self._connect(metrics_port=-1,
                             **{**self._plan_options, "epoch_offset": consumed,
                                "epochs": epoch + 1})
        rest.set_epoch(epoch, 0)
        self._rest = _EpochRest(epoch, consumed, next_batch, rest)
        self._epoch = epoch
        self._pending = (epoch, next_batch)

    def stats(self) -> Dict[str, object]:
        """What the loader did so far, as a dict:

        - requested: batch ids asked of servers; received: batches that
          arrived; delivered: batches handed to this process;
        - dropped: fetched ahead and then not wanted (the trainer moved to
          another epoch or resume position);
        - held_ahead: now, batches received and not yet taken; in_flight:
          now, asked of servers and not yet arrived (if the run stops here,
          both were built for nothing: see `epochs`);
        - reassigned: batch ids asked again of another server after theirs
          failed, stalled or left;
        - stalled: streams cancelled for holding batches half a
          stall_timeout without sending one;
        - samples_failed: samples of delivered batches that could not be
          read or decoded, each replaced by a deterministic other sample
          (or, when those failed too, left unfilled);
        - samples_decoded_with_warnings: samples decoded although their file
          is damaged (a JPEG whose data ends early: the missing rows are
          filled as libjpeg fills them, as PIL and torchvision do);
        - window: batches the loader may hold ahead of the trainer (its
          memory budget, max_buffered_mb, divided by the batch size);
        - depths: per connection, the batch ids it keeps requested (each
          measures what keeps its server's threads busy);
        - servers: the servers in use now;
        - same_host_streams: streams whose pixels are copied from a
          same-host server's shared memory instead of read from a socket.
        """
        return self._loader.stats()

    def shutdown_servers(self, reason: str = "training finished", timeout: float = 10.0) -> None:
        """Tells this loader's servers to shut down (see heterodl.shutdown_servers):
        call it once, from one rank, when training ends."""
        shutdown_servers(self.servers, reason, timeout, self._auth_token, *self._tls)

    @property
    def servers(self) -> List[str]:
        """The data servers in use now (they change with servers_file and
        servers_dns)."""
        return list(self._loader.stats()["servers"])

    @property
    def metrics_port(self) -> Optional[int]:
        """The port serving this loader's Prometheus metrics at /metrics
        (the one bound when metrics_port=0 was given), or None."""
        return self._loader.metrics_port()

    @property
    def format(self) -> str:
        """What batches hold: "torch", "numpy" or "dlpack"."""
        return self._format

    @property
    def class_names(self) -> List[str]:
        """The dataset's class names: label i is class_names[i]."""
        return list(self.dataset.classes)

    @property
    def num_samples(self) -> int:
        """Samples in the dataset (all ranks together)."""
        return len(self.dataset)

    def __len__(self) -> int:
        """Batches in this rank's share of an epoch (of the epoch set now:
        the rest of an epoch resumed from another world size has its own)."""
        loader, first = self._plan_of(self._epoch)
        return first + len(loader)

    def __iter__(self) -> Iterator[Batch]:
        """The epoch set by set_epoch() from its start, or from the position
        resume() or load_state_dict() set; a later iteration starts the epoch
        over. The iteration begins at its first batch: an iterator that is
        made and dropped (a framework checking that the loader iterates)
        changes nothing."""
        return _EpochIterator(self._loader, self._import, self._copy_guard,
                              self._begin_iteration, self._took)

    def _batches(self) -> Iterator[Batch]:
        """Like iter(loader), but every step is the Batch itself (a user's
        Python dataset's too, not its collated structure)."""
        return _EpochIterator(self._loader, self._import, self._copy_guard,
                              self._begin_iteration, self._took, structured=False)

    def _reposition(self, epoch: int, next_batch: int) -> None:
        """The next iteration starts at `next_batch` of `epoch`, a position
        this loader gave (a rest's included, which resume() would drop)."""
        if self._rest is not None and self._rest.epoch == epoch:
            self._epoch = epoch
            self._pending = (epoch, next_batch)
            self._rest.loader.set_epoch(epoch, next_batch - self._rest.first)
        else:
            self.resume(epoch, next_batch)

    def _took(self, batch: Batch) -> None:
        self.last_batch = batch

    def _begin_iteration(self):
        start = self._pending if self._pending is not None else (self._epoch, 0)
        self._pending = None
        loader, first = self._plan_of(start[0])
        loader.set_epoch(start[0], start[1] - first)
        return loader, first

    def __repr__(self) -> str:
        return (f"RemoteDataLoader(servers={self.servers!r}, {len(self)} batches per epoch, "
                f"{self.num_samples} samples, rank {self.rank} of {self.world_size})")
