"""heterodl: a remote data loader for PyTorch trainers.

Batches are decoded and augmented by `heterodl serve` processes (usually on
CPU-only machines) and arrive as uint8 tensors:

    import heterodl
    loader = heterodl.RemoteDataLoader(servers=["algo-2:50051"], batch_size=256,
                                       rank=rank, world_size=world_size)
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            images = batch.images.cuda(non_blocking=True)  # uint8 [B, H, W, 3]
            labels = batch.labels.cuda(non_blocking=True)  # int64 [B]
    loader.shutdown_servers()  # the data group exits now, not at its idle timeout

With CUDA present the images arrive in pinned (page-locked) memory, so the
copy above is truly asynchronous; `pin_memory=False` turns that off.

Errors are the exceptions Python code expects: ValueError for a bad argument
(a pipeline the servers cannot parse included), ConnectionError when no
server can be reached, TimeoutError when no batch comes within
`stall_timeout`, PermissionError for a refused token, and Ctrl-C interrupts a
wait for servers or for a batch (KeyboardInterrupt).
"""

import logging
import numbers
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch  # noqa: F401  (loads LibTorch before the extension needs it)

from . import _heterodl
from ._heterodl import Batch, __version__

__all__ = ["Batch", "RemoteDataLoader", "shutdown_servers", "set_log_level", "__version__"]

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


def _server_list(servers: Union[str, Sequence[str]]) -> List[str]:
    if isinstance(servers, str):
        servers = servers.split(",")
    try:
        listed = [s.strip() for s in servers]
    except (TypeError, AttributeError):
        raise TypeError("servers must be 'host:port', 'host:port,host:port' or a list of "
                        f"them, not {type(servers).__name__}") from None
    listed = [s for s in listed if s]
    if not listed:
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


class RemoteDataLoader:
    """Batches of one rank from heterodl data servers, in order: a drop-in for a
    `torch.utils.data.DataLoader` over the same samples.

    Iterating runs the epoch set by `set_epoch()` (shuffled as PyTorch's
    `DistributedSampler` would, split across `world_size` ranks) from its
    start, or from where `resume()` says. Every sample of an epoch reaches
    its rank exactly once, through server failures.

    Args:
        servers: the data servers, "host:port", "host:port,host:port" or a
            list of them. Any server can build any batch.
        batch_size: samples per batch for this rank.
        pipeline: the augmentation pipeline the servers run, e.g.
            "random_resized_crop(224)|hflip(0.5)"; "" is the servers'
            default. One the servers cannot parse is a ValueError here.
        rank: this rank, in [0, world_size).
        world_size: how many ranks share each epoch.
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
        pin_memory: receive into pinned memory (default: when CUDA is
            available).
        tls_ca, tls_cert, tls_key, tls_server_name: TLS to the servers
            (docs/operations.md).
        pixel_channel: receive pixels on the servers' pixel channels (not
            under TLS); False sends them through gRPC.
    """

    def __init__(self, servers: Union[str, Sequence[str]], batch_size: int, pipeline: str = "",
                 rank: int = 0, world_size: int = 1, seed: int = 0, drop_last: bool = False,
                 shuffle: bool = True, max_buffered_mb: float = 1024.0,
                 connections_per_server: int = 2, connect_timeout: float = 60.0,
                 stall_timeout: float = 60.0, auth_token: Optional[str] = None,
                 pin_memory: Optional[bool] = None, tls_ca: str = "", tls_cert: str = "",
                 tls_key: str = "", tls_server_name: str = "", pixel_channel: bool = True):
        self._servers = _server_list(servers)
        world_size = _integer("world_size", world_size, 1, 1 << 20)
        rank = _integer("rank", rank, 0, world_size - 1)
        if not isinstance(pipeline, str):
            raise TypeError(f"pipeline must be a str, not {type(pipeline).__name__}")
        if auth_token is not None and not isinstance(auth_token, str):
            raise TypeError("auth_token must be a str or None")
        self._auth_token = auth_token
        self._tls = (tls_ca, tls_cert, tls_key, tls_server_name)
        self._loader = _heterodl.RemoteDataLoader(
            self._servers, _integer("batch_size", batch_size, 1, 65536), pipeline, rank,
            world_size, _integer("seed", seed, 0, (1 << 64) - 1), bool(drop_last), bool(shuffle),
            _positive("max_buffered_mb", max_buffered_mb, "MB"),
            _integer("connections_per_server", connections_per_server, 1, 16),
            _positive("connect_timeout", connect_timeout, "seconds"),
            _positive("stall_timeout", stall_timeout, "seconds"), auth_token, pin_memory, tls_ca,
            tls_cert, tls_key, tls_server_name, bool(pixel_channel))

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration runs (it changes the shuffle). Its first
        batches are fetched at once, while the caller does whatever comes
        before iterating."""
        self._loader.set_epoch(_integer("epoch", epoch, 0, (1 << 32) - 1))

    def resume(self, epoch: int, next_batch: int) -> None:
        """The next iteration starts at batch `next_batch` of `epoch` (from a
        checkpoint's `position()`)."""
        self._loader.resume(_integer("epoch", epoch, 0, (1 << 32) - 1),
                            _integer("next_batch", next_batch, 0, (1 << 62)))

    def position(self) -> Tuple[int, int]:
        """(epoch, next batch): what to save in a checkpoint and pass to resume()."""
        return self._loader.position()

    def stats(self) -> Dict[str, object]:
        """What the loader did: batches requested, received, delivered, dropped
        (fetched ahead, then not wanted), reassigned (after a server failed);
        its window and per-connection depths."""
        return self._loader.stats()

    def shutdown_servers(self, reason: str = "training finished", timeout: float = 10.0) -> None:
        """Tells this loader's servers to shut down (see heterodl.shutdown_servers):
        call it once, from one rank, when training ends."""
        shutdown_servers(self._servers, reason, timeout, self._auth_token, *self._tls)

    @property
    def servers(self) -> List[str]:
        return list(self._servers)

    @property
    def class_names(self) -> List[str]:
        return self._loader.class_names

    @property
    def num_samples(self) -> int:
        """Samples in the dataset (all ranks together)."""
        return self._loader.num_samples

    def __len__(self) -> int:
        """Batches in this rank's share of an epoch."""
        return len(self._loader)

    def __iter__(self):
        return iter(self._loader)

    def __repr__(self) -> str:
        return (f"RemoteDataLoader(servers={self._servers!r}, {len(self)} batches per epoch, "
                f"{self.num_samples} samples)")
