"""TensorFlow and Keras on heterodl batches. Imported only when asked
(`import heterodl.tf`); needs TensorFlow, which the heterodl package itself
never imports or links.

    import heterodl, heterodl.tf
    loader = heterodl.RemoteDataLoader(servers, batch_size=256,
                                       pipeline="random_resized_crop(224)|hflip(0.5)")
    dataset = heterodl.tf.dataset(loader)          # a tf.data.Dataset of (images, labels)
    model.fit(dataset, epochs=10,
              callbacks=[heterodl.tf.Checkpoint(dataset, "checkpoints/")])

Each iteration of the dataset is one epoch of the loader: the first runs the
loader's epoch (or the position a checkpoint restored), each later one the
next epoch, so `model.fit(dataset, epochs=E)` reads E epochs in their
planned order. A batch's arrays become tensors through DLPack, without a
copy (the tensors hold the received memory until TensorFlow frees them).
"""

import json
import os
import warnings
from typing import Any, Dict, List, Optional, Tuple

import tensorflow as tf

from .loader import Batch, RemoteDataLoader, _rebuild

__all__ = ["dataset", "Checkpoint"]


def dataset(loader: RemoteDataLoader, prefetch: Optional[int] = None,
            device: Optional[str] = None) -> tf.data.Dataset:
    """A tf.data.Dataset of `loader`'s batches, one epoch per iteration.

    Its elements, by what the servers build (element_spec says so exactly,
    from one sample a server builds now):
      - images and labels: (uint8 [B, H, W, 3], int64 [B]);
      - segmentation: (images, masks [B, H, W]);
      - detection: (images, {"boxes": float32 [B, None, 4], "labels": int64
        [B, None], "iscrowd": uint8 [B, None]}), each a tf.RaggedTensor whose
        rows are the samples' objects;
      - views: ((views_0 uint8 [B, count, H, W, 3], views_1, ...), labels);
      - a user's Python dataset: its samples' structure (dicts as dicts,
        tuples and lists as tuples), a field whose samples differ in length
        as a tf.RaggedTensor.
    A slot no sample could fill has label -100 (the loader's docs): give
    Keras losses `ignore_class=-100`.

    Args:
        loader: the RemoteDataLoader (any format). Its rank and world size
            are this worker's share: they default to TF_CONFIG's task
            (MultiWorkerMirroredStrategy) or Horovod's rank when
            torch.distributed is not in use. The dataset is not sharded
            again (auto-sharding is off): each worker's elements are its
            loader's batches, which a strategy splits over the worker's
            replicas.
        prefetch: batches tf.data holds ready ahead of the model (default:
            tf.data.AUTOTUNE); the loader fetches ahead of that on its own.
        device: e.g. "/gpu:0": batches are copied to that device ahead of
            the step (tf.data.experimental.prefetch_to_device), for a loop
            without a distribution strategy (a strategy places them itself).
    """
    if not isinstance(loader, RemoteDataLoader):
        raise TypeError(f"heterodl.tf.dataset takes a RemoteDataLoader, not "
                        f"{type(loader).__name__}")
    feed = _Feed(loader)
    data = tf.data.Dataset.from_generator(feed.epoch, output_signature=feed.element_spec)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    data = data.with_options(options)
    if device is not None:
        data = data.apply(tf.data.experimental.prefetch_to_device(device))
    else:
        data = data.prefetch(tf.data.AUTOTUNE if prefetch is None else prefetch)
    return _LoaderEpochs(data, feed)


class _LoaderEpochs(tf.data.Dataset):
    """The pipeline `dataset()` builds, saying how many batches its next
    iteration has (len(loader)): Keras sizes each epoch of `fit` by a
    dataset's cardinality and, without one, by the first epoch it runs,
    which after a mid-epoch restart is the rest of an epoch. (An asserted
    cardinality cannot serve: the rest of an epoch is shorter.)"""

    def __init__(self, data: tf.data.Dataset, feed: "_Feed"):
        self._data = data
        self._heterodl_feed = feed  # what Checkpoint reads the position from
        super().__init__(data._variant_tensor)

    def _inputs(self) -> List[tf.data.Dataset]:
        return [self._data]

    @property
    def element_spec(self) -> Any:
        return self._data.element_spec

    def cardinality(self) -> tf.Tensor:
        return tf.constant(len(self._heterodl_feed.loader), tf.int64)


class _Feed:
    """The epochs of one loader as the generator behind a dataset, and where
    the current iteration started (Checkpoint counts the model's batches on
    from there: tf.data holds batches ahead of the model)."""

    def __init__(self, loader: RemoteDataLoader):
        self.loader = loader
        probe = loader._sample_batch(0, structured=False)
        structure = loader._loader.sample_structure()
        self._structure = None if structure is None else json.loads(structure)
        self._ragged = set(probe.lengths)
        self._specs = {name: _field_spec(array, name in self._ragged)
                       for name, array in probe.fields.items()}
        self._specs["labels"] = tf.TensorSpec([None], tf.int64)
        self.element_spec = self._arrange(self._specs, probe.fields)
        self.started: Optional[Tuple[int, int]] = None  # (epoch, first batch) of this iteration
        self._finished = False

    def epoch(self):
        """One iteration of the dataset: the loader's epoch from where it
        stands the first time; the next epoch once an iteration has run to
        its end; the same start again after one that was left early (Keras
        takes one batch to build a model under a strategy, then iterates
        anew)."""
        loader = self.loader
        if self.started is not None:
            if self._finished:
                loader.set_epoch(self.started[0] + 1)
            else:
                loader._reposition(*self.started)
        self.started = loader.position()
        self._finished = False
        for batch in loader._batches():
            yield self._element(batch)
        self._finished = True

    def _element(self, batch: Batch) -> Any:
        tensors = {}
        for name, array in batch.fields.items():
            tensor = _import(array)
            if name in self._ragged:
                tensor = tf.RaggedTensor.from_row_lengths(
                    tensor, tf.constant(batch.lengths[name], tf.int64), validate=False)
            tensors[name] = tensor
        tensors["labels"] = _import(batch.labels)
        return self._arrange(tensors, batch.fields)

    def _arrange(self, values: Dict[str, Any], fields: Dict[str, Any]) -> Any:
        """`values` (specs or tensors, by field name) in the batch's structure."""
        if self._structure is not None:
            # TensorFlow's containers: namedtuples as dicts, sequences as tuples.
            return _rebuild(self._structure, [values[name] for name in fields],
                            named=lambda _, keys, items: dict(zip(keys, items)),
                            sequence=tuple)
        if "views_0" in fields:
            views = tuple(values[f"views_{g}"] for g in range(len(fields))
                          if f"views_{g}" in fields)
            return views, values["labels"]
        if "masks" in fields:
            return values["images"], values["masks"]
        if "boxes" in fields:
            return values["images"], {"boxes": values["boxes"], "labels": values["box_labels"],
                                      "iscrowd": values["iscrowd"]}
        return values["images"], values["labels"]


def _import(array: Any) -> tf.Tensor:
    """A tensor over `array`'s memory (DLPack: no copy)."""
    return tf.experimental.dlpack.from_dlpack(array.__dlpack__())


def _field_spec(array: Any, ragged: bool) -> tf.TypeSpec:
    """The spec of a field of any batch size, from one sample's batch."""
    tensor = _import(array)
    if ragged:
        return tf.RaggedTensorSpec([None, None, *tensor.shape[1:]], tensor.dtype, ragged_rank=1,
                                   row_splits_dtype=tf.int64)
    return tf.TensorSpec([None, *tensor.shape[1:]], tensor.dtype)


class Checkpoint(tf.keras.callbacks.Callback):
    """Checkpoints the model (its weights and its optimizer's state, through
    tf.train.Checkpoint) together with the loader's position at the same
    batch, and restores both when `fit` starts again, so that a restarted
    `model.fit(dataset, epochs=E, callbacks=[...])` goes on at the exact
    next batch of the epoch it stopped in.

    Args:
        data: the dataset heterodl.tf.dataset made.
        directory: where the checkpoints go (tf.train.CheckpointManager's
            files, and `loader-<N>.json` beside each).
        save_freq: "epoch", or every this many batches (and at each
            epoch's end).
        max_to_keep: checkpoints kept.
    Every worker of a multi-worker job writes its own directory's files (as
    tf.train.CheckpointManager expects, with chief and workers told apart by
    the directory); the loader positions are the same on every worker.
    """

    def __init__(self, data: tf.data.Dataset, directory: str, save_freq: Any = "epoch",
                 max_to_keep: int = 3):
        super().__init__()
        feed = getattr(data, "_heterodl_feed", None)
        if feed is None:
            raise TypeError("heterodl.tf.Checkpoint takes the dataset heterodl.tf.dataset() "
                            "returned (a dataset transformed after it no longer says where "
                            "its batches came from)")
        if save_freq != "epoch" and (isinstance(save_freq, bool)
                                     or not isinstance(save_freq, int) or save_freq < 1):
            raise ValueError(f"save_freq must be 'epoch' or a positive number of batches, not "
                             f"{save_freq!r}")
        self._feed = feed
        self._directory = os.fspath(directory)
        self._save_freq = save_freq
        self._max_to_keep = max_to_keep
        self._manager: Optional[tf.train.CheckpointManager] = None
        self._short_epoch: Optional[int] = None  # a restored epoch's rest
        self._quiet: Optional[warnings.catch_warnings] = None

    def _checkpoint_manager(self) -> tf.train.CheckpointManager:
        if self._manager is None:
            optimizer = self.model.optimizer
            if optimizer is not None and not optimizer.built:
                optimizer.build(self.model.trainable_variables)  # so its state restores
            self._manager = tf.train.CheckpointManager(
                tf.train.Checkpoint(model=self.model, optimizer=optimizer), self._directory,
                max_to_keep=self._max_to_keep)
        return self._manager

    def on_train_begin(self, logs: Optional[Dict[str, Any]] = None) -> None:
        manager = self._checkpoint_manager()
        # The newest checkpoint whose loader position was written too (the
        # position is written after the model: a crash between leaves the
        # one before).
        for path in reversed(manager.checkpoints):
            if os.path.exists(self._loader_file(path)):
                break
        else:
            return
        manager.checkpoint.restore(path).expect_partial()
        with open(self._loader_file(path)) as f:
            state = json.load(f)
        loader = self._feed.loader
        loader.load_state_dict(state)
        epoch, next_batch = loader.position()
        if next_batch >= len(loader):  # saved at an epoch's end
            epoch += 1
            loader.set_epoch(epoch)
        self._feed.started = None  # the next iteration starts at the restored position
        # What Keras's own BackupAndRestore sets: fit's first epoch.
        self.model._initial_epoch = epoch
        if next_batch > 0 and next_batch < len(loader):
            # That epoch has the rest's batches, fewer than Keras counts
            # from the dataset's cardinality: it warns that the input ran
            # out when the rest ends, which is where the epoch ends.
            self._short_epoch = epoch

    def on_epoch_begin(self, epoch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        if epoch == self._short_epoch:
            self._quiet = warnings.catch_warnings()
            self._quiet.__enter__()
            warnings.filterwarnings("ignore", message="Your input ran out of data")

    def on_train_batch_end(self, batch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        if self._save_freq != "epoch" and (batch + 1) % self._save_freq == 0:
            self._save(batch + 1)

    def on_epoch_end(self, epoch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        if self._quiet is not None:
            self._quiet.__exit__(None, None, None)
            self._quiet = None
        self._save(None)

    def _save(self, batches: Optional[int]) -> None:
        """Saves after `batches` batches of this fit epoch (None: all)."""
        loader = self._feed.loader
        epoch, first = self._feed.started
        if batches is None:
            state = loader._state_at(epoch, loader._state_at(epoch, first)["batches_per_epoch"])
        else:
            state = loader._state_at(epoch, first + batches)
        path = self._checkpoint_manager().save()
        temporary = self._loader_file(path) + ".tmp"
        with open(temporary, "w") as f:
            json.dump(state, f)
        os.replace(temporary, self._loader_file(path))

    @staticmethod
    def _loader_file(checkpoint_path: str) -> str:
        return checkpoint_path + ".loader.json"
