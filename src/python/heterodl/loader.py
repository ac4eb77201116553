"""heterodl.RemoteDataLoader and what it returns (see heterodl/__init__.py)."""

import collections
import dataclasses
import importlib.util
import logging
import numbers
import os
import sys
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

    A batch unpacks as (images, labels), like a DataLoader's batch of an
    ImageFolder: `for images, labels in loader:`. len(batch) is B."""

    images: Any
    labels: Any
    indices: Any
    failed: int = 0  # slots filled by a replacement because their sample was unreadable
    epoch: int = 0
    index: int = 0  # position of the batch in its rank's epoch

    def __iter__(self) -> Iterator[Any]:
        return iter((self.images, self.labels))

    def __len__(self) -> int:
        return len(self.labels)


class _EpochSampler:
    """What loops written for a DataLoader over a DistributedSampler call
    (`loader.sampler.set_epoch(epoch)`, PyTorch Lightning among them): it sets
    the loader's epoch."""

    def __init__(self, loader: "RemoteDataLoader"):
        self._loader = loader

    def set_epoch(self, epoch: int) -> None:
        self._loader.set_epoch(epoch)

    def __len__(self) -> int:
        return self._loader.num_samples


class _RemoteDataset:
    """`loader.dataset`: the served dataset as far as a trainer asks about it
    (its length and class names, like an ImageFolder's)."""

    def __init__(self, num_samples: int, classes: List[str]):
        self._num_samples = num_samples
        self.classes = classes

    def __len__(self) -> int:
        return self._num_samples


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
    call goes on where that one stopped."""

    def __init__(self, loader, importer: Callable[[Any], Any],
                 copy_guard: Optional[_PinnedCopyGuard]):
        self._loader = loader
        self._import = importer
        self._copy_guard = copy_guard

    def __iter__(self) -> "_EpochIterator":
        return self

    def __next__(self) -> Batch:
        guard = self._copy_guard
        if guard is not None:
            guard.next_requested()
        received = self._loader.next()
        if received is None:
            raise StopIteration
        images, labels, indices, failed, epoch, index = received
        if guard is not None:
            guard.delivered((images, labels, indices))
        return Batch(self._import(images), self._import(labels), self._import(indices), failed,
                     epoch, index)


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


def _distributed_defaults() -> Tuple[int, int]:
    """(rank, world size) of the job this process is in: torch.distributed's
    when it is initialized, else torchrun's or Slurm's environment, else one
    process."""
    # A script that initialized torch.distributed imported it: a NumPy or JAX
    # user's process is not made to import torch to find that it did not.
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    for rank_name, size_name in (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS")):
        if rank_name in os.environ and size_name in os.environ:
            try:
                return int(os.environ[rank_name]), int(os.environ[size_name])
            except ValueError:
                raise ValueError(f"{rank_name}={os.environ[rank_name]!r} and {size_name}="
                                 f"{os.environ[size_name]!r} are not integers") from None
    return 0, 1


class RemoteDataLoader:
    """Batches of one rank from heterodl data servers, in order: a drop-in for a
    `torch.utils.data.DataLoader` over the same samples.

    Iterating runs the epoch set by `set_epoch()` (shuffled as PyTorch's
    `DistributedSampler` would, split across `world_size` ranks) from its
    start, or from where `resume()` says. Every sample of an epoch reaches
    its rank exactly once, through server failures. Batches are `Batch`
    objects that unpack as (images, labels).

    Code written for a DataLoader keeps working: `len(loader)` is the
    batches per epoch, `loader.sampler.set_epoch(e)` (what DDP loops and
    PyTorch Lightning call) sets the epoch, `loader.dataset` has `len()` and
    `classes`, `loader.batch_size` is the batch size.

    Args:
        servers: the data servers, "host:port", "host:port,host:port" or a
            list of them. Any server can build any batch. May be None when
            servers_file or servers_dns names them.
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
        rank: this rank, in [0, world_size). Default: torch.distributed's
            rank when it is initialized, else $RANK (torchrun) or
            $SLURM_PROCID, else 0.
        world_size: how many ranks share each epoch (default likewise).
        seed: seeds the shuffle and the augmentations (same seed, same
            batches, bit for bit, whichever server builds them).
        drop_last: drop the last short batch of each rank's share.
        shuffle: False reads every epoch in dataset order (evaluation).
        max_buffered_mb: memory for batches fetched ahead of the trainer.
        connections_per_server: TCP connections to each server.
        connect_timeout: seconds to wait for servers that are not up yet
            (why one does not answer is logged at once).
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
    """

    def __init__(self, servers: Union[str, Sequence[str], None] = None,
                 batch_size: Optional[int] = None, pipeline: str = "",
                 rank: Optional[int] = None, world_size: Optional[int] = None, seed: int = 0,
                 drop_last: bool = False, shuffle: bool = True, max_buffered_mb: float = 1024.0,
                 connections_per_server: int = 2, connect_timeout: float = 60.0,
                 stall_timeout: float = 60.0, auth_token: Optional[str] = None,
                 pin_memory: Optional[bool] = None, format: Optional[str] = None,
                 tls_ca: str = "", tls_cert: str = "", tls_key: str = "",
                 tls_server_name: str = "", pixel_channel: bool = True,
                 servers_file: str = "", servers_dns: str = ""):
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
        self._epoch = 0
        self._next_batch = 0
        self._loader = _heterodl.Loader(
            self._servers, self.batch_size, pipeline, rank, world_size,
            _integer("seed", seed, 0, (1 << 64) - 1), bool(drop_last), bool(shuffle),
            _positive("max_buffered_mb", max_buffered_mb, "MB"),
            _integer("connections_per_server", connections_per_server, 1, 16),
            _positive("connect_timeout", connect_timeout, "seconds"),
            _positive("stall_timeout", stall_timeout, "seconds"), auth_token, bool(pin_memory),
            *self._tls, bool(pixel_channel), pin_device, servers_file, servers_dns)
        self.rank = rank
        self.world_size = world_size
        self.pin_memory = bool(pin_memory)
        self.sampler = _EpochSampler(self)
        self.batch_sampler = None
        self.dataset = _RemoteDataset(self._loader.num_samples(), self._loader.class_names())

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration runs (it changes the shuffle). Its first
        batches are fetched at once, while the caller does whatever comes
        before iterating."""
        self.resume(epoch, 0)

    def resume(self, epoch: int, next_batch: int) -> None:
        """The next iteration starts at batch `next_batch` of `epoch` (from a
        checkpoint's `position()`)."""
        self._epoch = _integer("epoch", epoch, 0, (1 << 32) - 1)
        self._next_batch = _integer("next_batch", next_batch, 0, (1 << 62))
        self._loader.set_epoch(self._epoch, self._next_batch)

    def position(self) -> Tuple[int, int]:
        """(epoch, next batch): what to save in a checkpoint and pass to resume()."""
        return self._loader.position()

    def stats(self) -> Dict[str, object]:
        """What the loader did: batches requested, received, delivered, dropped
        (fetched ahead, then not wanted), reassigned (after a server failed or
        left), stalled (servers cancelled for sitting on batches); its window,
        per-connection depths, the servers it uses now, and same_host_streams
        (streams whose pixels it copies from a same-host server's shared
        memory)."""
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
    def format(self) -> str:
        return self._format

    @property
    def class_names(self) -> List[str]:
        return list(self.dataset.classes)

    @property
    def num_samples(self) -> int:
        """Samples in the dataset (all ranks together)."""
        return len(self.dataset)

    def __len__(self) -> int:
        """Batches in this rank's share of an epoch."""
        return len(self._loader)

    def __iter__(self) -> Iterator[Batch]:
        """The epoch set by set_epoch() from its start, or from where resume()
        said; a later iteration starts the epoch over."""
        self._loader.set_epoch(self._epoch, self._next_batch)
        self._next_batch = 0
        return _EpochIterator(self._loader, self._import, self._copy_guard)

    def __repr__(self) -> str:
        return (f"RemoteDataLoader(servers={self.servers!r}, {len(self)} batches per epoch, "
                f"{self.num_samples} samples, rank {self.rank} of {self.world_size})")
