"""One rank of a Lightning DDP job on CPU that torchrun starts, for
lightning_test.py's resume on another number of devices: trains a tiny
classifier on a RemoteDataLoader, checkpoints every CHECKPOINT_EVERY steps,
and records each batch it trains on (one JSON line per batch and rank).

    torchrun --nproc-per-node W lightning_resize_worker.py SERVERS ROOT \
        --batch-size B [--max-steps N] [--ckpt-path FILE] [--epoch-length]
"""

import argparse
import json
import os

import lightning
import torch

import heterodl
import heterodl.lightning

CHECKPOINT_EVERY = 5

parser = argparse.ArgumentParser()
parser.add_argument("servers")
parser.add_argument("root", help="checkpoints/ and records/ go here")
parser.add_argument("--batch-size", type=int, required=True)
parser.add_argument("--max-steps", type=int, default=-1)
parser.add_argument("--ckpt-path", default=None)
parser.add_argument("--epoch-length", action="store_true",
                    help="with heterodl.lightning.EpochLength()")
args = parser.parse_args()


class Tiny(lightning.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(16 * 16 * 3, 14)

    def training_step(self, batch, batch_idx):
        images, labels = batch
        self.records.write(json.dumps({
            "world": self.trainer.world_size, "rank": self.global_rank,
            "epoch": self.current_epoch, "batch_idx": batch_idx, "step": self.global_step,
            "indices": batch.indices.tolist()}) + "\n")
        self.records.flush()
        x = images.flatten(1).float() / 255
        return torch.nn.functional.cross_entropy(self.layer(x), labels)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


callbacks = [lightning.pytorch.callbacks.ModelCheckpoint(
    dirpath=os.path.join(args.root, "checkpoints"), every_n_train_steps=CHECKPOINT_EVERY,
    save_top_k=-1, filename="{epoch}-{step}")]
if args.epoch_length:
    callbacks.append(heterodl.lightning.EpochLength())
trainer = lightning.Trainer(
    accelerator="cpu", devices=int(os.environ["LOCAL_WORLD_SIZE"]), strategy="ddp",
    max_epochs=2, max_steps=args.max_steps, logger=False, enable_progress_bar=False,
    enable_model_summary=False, default_root_dir=args.root, num_sanity_val_steps=0,
    callbacks=callbacks)
loader = heterodl.RemoteDataLoader(servers=args.servers, batch_size=args.batch_size,
                                   pipeline="random_resized_crop(16)", seed=3,
                                   pin_memory=False)
module = Tiny()
os.makedirs(os.path.join(args.root, "records"), exist_ok=True)
with open(os.path.join(args.root, "records",
                       f"rank{trainer.global_rank}.jsonl"), "a") as module.records:
    trainer.fit(module, train_dataloaders=loader, ckpt_path=args.ckpt_path)
# Lightning's DDP strategy leaves the Gloo process group to the interpreter's
# exit, where torch's Gloo threads can outlive what they use and abort the
# process ("terminate called without an active exception", about one run in
# seven): end it here, as a script of one's own would.
if torch.distributed.is_initialized():
    torch.distributed.destroy_process_group()
