"""One process of a Hugging Face Accelerate job that torchrun starts, for
huggingface_test.py: the model and optimizer through accelerator.prepare(),
the RemoteDataLoader registered for checkpointing, accelerator.save_state()
after every step, and with --die-after N gone (os._exit) right after step
N's checkpoint; with --resume, accelerator.load_state() first. Records each
batch's dataset indices (one JSON line per batch and process).

    torchrun --nproc-per-node 2 accelerate_worker.py SERVERS DIR RECORDS \
        [--die-after N] [--resume]
"""

import argparse
import json
import os

import torch
from accelerate import Accelerator

import heterodl

parser = argparse.ArgumentParser()
parser.add_argument("servers")
parser.add_argument("directory", help="accelerator.save_state's folder")
parser.add_argument("records")
parser.add_argument("--die-after", type=int, default=0)
parser.add_argument("--resume", action="store_true")
args = parser.parse_args()

accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(16 * 16 * 3, 14)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
model, optimizer = accelerator.prepare(model, optimizer)
# The loader takes its rank and world size from the job (torchrun's); the
# servers split every epoch, so accelerate has nothing to shard.
loader = heterodl.RemoteDataLoader(args.servers, batch_size=4, seed=7, pin_memory=False,
                                   pipeline="random_resized_crop(16)")
assert (loader.rank, loader.world_size) == (accelerator.process_index,
                                            accelerator.num_processes)
accelerator.register_for_checkpointing(loader)
if args.resume:
    accelerator.load_state(args.directory)
start_epoch = loader.epoch

step = 0
with open(f"{args.records}.{accelerator.process_index}", "a") as records:
    for epoch in range(start_epoch, 2):
        loader.sampler.set_epoch(epoch)
        for images, labels in loader:
            records.write(json.dumps({"epoch": epoch, "indices": loader.last_batch.indices.tolist()})
                          + "\n")
            records.flush()
            loss = torch.nn.functional.cross_entropy(
                model(images.flatten(1).float() / 255), labels, ignore_index=-100)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            accelerator.save_state(args.directory)
            if step == args.die_after:
                accelerator.wait_for_everyone()
                os._exit(0)
accelerator.end_training()
