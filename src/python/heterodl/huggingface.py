"""Hugging Face's Trainer on a RemoteDataLoader. Imported only when asked
(`import heterodl.huggingface`); needs `transformers`.

    class ImageTrainer(transformers.Trainer):
        def get_train_dataloader(self):
            return loader                        # a heterodl.RemoteDataLoader

        def compute_loss(self, model, batch, return_outputs=False, **kwargs):
            images, labels = batch
            ...

    args = transformers.TrainingArguments(..., ignore_data_skip=True)
    trainer = ImageTrainer(model=model, args=args,
                           callbacks=[heterodl.huggingface.LoaderState(loader)])
    trainer.train(resume_from_checkpoint=True)

Accelerate alone needs nothing of this module: `accelerator.prepare()` passes
a RemoteDataLoader through untouched (the servers already split every epoch
across the processes), and `accelerator.register_for_checkpointing(loader)`
saves and restores its position with `save_state()` / `load_state()`.
"""

import json
import os
from typing import Any

from transformers import TrainerCallback

from .loader import RemoteDataLoader

__all__ = ["LoaderState"]

STATE_FILE = "heterodl_loader.json"


class LoaderState(TrainerCallback):
    """Saves the loader's state_dict() into every checkpoint the Trainer
    writes (`checkpoint-N/heterodl_loader.json`, from process 0: every
    process is at the same position) and loads it back when training resumes
    from one, so that the resumed epoch goes on at the exact next batch
    instead of replaying the epoch's first batches to skip them.

    The Trainer's own skip must be off (`ignore_data_skip=True`): it would
    rebuild the loader as a torch DataLoader over single samples."""

    def __init__(self, loader: RemoteDataLoader):
        if not isinstance(loader, RemoteDataLoader):
            raise TypeError(f"LoaderState takes a RemoteDataLoader, not {type(loader).__name__}")
        self._loader = loader

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == 0:
            return
        if not args.ignore_data_skip:
            raise ValueError("a RemoteDataLoader resumes from its own state: give the "
                             "TrainingArguments ignore_data_skip=True (the Trainer's skip would "
                             "read the epoch's first batches again, one sample at a time)")
        path = os.path.join(args.output_dir, f"checkpoint-{state.global_step}", STATE_FILE)
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: the checkpoint has no loader position (was it "
                                    "written without heterodl.huggingface.LoaderState?)")
        with open(path) as f:
            self._loader.load_state_dict(json.load(f))

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        temporary = os.path.join(folder, STATE_FILE + ".tmp")
        with open(temporary, "w") as f:
            json.dump(self._loader.state_dict(), f)
        os.replace(temporary, os.path.join(folder, STATE_FILE))
