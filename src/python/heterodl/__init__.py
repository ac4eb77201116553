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

With CUDA present the images arrive in pinned (page-locked) memory, so the
copy above is truly asynchronous; `pin_memory=False` turns that off.
"""

import torch  # noqa: F401  (loads LibTorch before the extension needs it)

from ._heterodl import Batch, RemoteDataLoader  # noqa: F401

__all__ = ["Batch", "RemoteDataLoader"]
