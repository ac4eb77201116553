"""PyTorch Lightning and heterodl: what a Trainer needs beyond the loader's
DataLoader shape. Imported only when asked (`import heterodl.lightning`);
needs `lightning` (or the older `pytorch_lightning`) installed.

    trainer = lightning.Trainer(..., callbacks=[heterodl.lightning.EpochLength()])
    trainer.fit(model, train_dataloaders=loader, ckpt_path="last.ckpt")
"""

from typing import Any, List

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the package's name before Lightning 2.0
    from pytorch_lightning.callbacks import Callback

from .loader import RemoteDataLoader

__all__ = ["EpochLength"]


class EpochLength(Callback):
    """Keeps the Trainer's batches per epoch equal to its RemoteDataLoaders'
    at the start of every epoch.

    Lightning measures an epoch's length once, before it restores a
    checkpoint, and then counts the batches it has run of the epoch on from
    the checkpoint's count. When a job resumes on another number of devices
    (or with another batch size), the rest of the interrupted epoch is split
    over the new ranks and may have more batches than the new world's whole
    epoch would (the same per-device batch on more devices): without this
    callback Lightning would end that epoch early and its last batches'
    samples would miss it (the loader warns when that happens). The epochs
    after it have the new world's length, which this callback also sets.
    A `limit_train_batches` other than the default is left to Lightning."""

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        # After the checkpoint is loaded; Lightning calls no
        # on_train_epoch_start for an epoch it resumes inside.
        self._set_length(trainer)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._set_length(trainer)

    def _set_length(self, trainer: Any) -> None:
        if trainer.limit_train_batches != 1.0:
            return
        # Lightning keeps the length in three places: the combined loader's
        # limits (and its iterator's), the fit loop's max_batches and the data
        # fetcher's length
        # (its end-of-epoch test). The fetcher counts the batches the
        # checkpoint had counted on top of what it fetches.
        fit_loop = trainer.fit_loop
        combined = getattr(fit_loop, "_combined_loader", None)
        if combined is None or not _remote_loaders(combined.iterables):
            return
        if combined.limits is not None:
            limits = [len(loader) if isinstance(loader, RemoteDataLoader) else limit
                      for loader, limit in zip(combined.flattened, combined.limits)]
            combined.limits = limits
            iterator = getattr(combined, "_iterator", None)  # made before, with the old ones
            if iterator is not None:
                iterator.limits = limits
        fit_loop.max_batches = len(combined)
        fetcher = getattr(fit_loop, "_data_fetcher", None)
        if fetcher is not None and getattr(fetcher, "length", None) is not None:
            fetcher.length = fit_loop.max_batches
            fetcher.done = fetcher.fetched >= fetcher.length


def _remote_loaders(iterables: Any) -> List[RemoteDataLoader]:
    """The RemoteDataLoaders among a Trainer's training iterables (one, or a
    list, tuple or dict of them, as train_dataloaders takes them)."""
    if isinstance(iterables, RemoteDataLoader):
        return [iterables]
    if isinstance(iterables, dict):
        iterables = list(iterables.values())
    if isinstance(iterables, (list, tuple)):
        return [item for item in iterables if isinstance(item, RemoteDataLoader)]
    return []
