"""heterodl: a remote data loader for training scripts.

Batches are decoded and augmented by `heterodl serve` processes (usually on
CPU-only machines) and arrive as uint8 arrays:

    import heterodl
    loader = heterodl.RemoteDataLoader(servers=["algo-2:50051"], batch_size=256)
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for images, labels in loader:                    # or: for batch in loader
            images = images.cuda(non_blocking=True)      # uint8 [B, H, W, 3]
            labels = labels.cuda(non_blocking=True)      # int64 [B]
    loader.shutdown_servers()  # the data group exits now, not at its idle timeout

The package links no torch: batches reach torch (`format="torch"`, the
default when torch is installed), NumPy or JAX (`format="numpy"`) or any
DLPack consumer (`format="dlpack"`) without a copy, and one wheel serves
every torch release and every CPython from 3.11. With torch and CUDA present
the images arrive in pinned (page-locked) memory, so the copy above is truly
asynchronous; `pin_memory=False` turns that off.

Errors are the exceptions Python code expects: ValueError for a bad argument
(a pipeline the servers cannot parse included), ConnectionError when no
server can be reached, TimeoutError when no batch comes within
`stall_timeout`, PermissionError for a refused token, and Ctrl-C interrupts a
wait for servers or for a batch (KeyboardInterrupt).
"""

from ._heterodl import Array, __version__
from .loader import FORMATS, Batch, RemoteDataLoader, set_log_level, shutdown_servers

__all__ = ["Array", "Batch", "FORMATS", "RemoteDataLoader", "shutdown_servers", "set_log_level",
           "__version__"]
