"""One rank of a CPU data-parallel job that torchrun starts, for
resize_resume_test.py: reads epochs from a RemoteDataLoader as a DDP loop
does (an all_reduce per step keeps the ranks in step), records every batch
it trains on, and has rank 0 checkpoint the loader's state_dict() after
every step. With --die-after N the job dies (os._exit, no cleanup) right
after step N's checkpoint, as a preempted job does; with a checkpoint to
start from, it resumes there, whatever world size wrote it.

    torchrun --nproc-per-node W resize_worker.py SERVERS RECORDS CHECKPOINT \
        --batch-size B --epochs E [--resume-from FILE] [--die-after N]
"""

import argparse
import json
import os

import torch
import torch.distributed as dist

import heterodl

parser = argparse.ArgumentParser()
parser.add_argument("servers")
parser.add_argument("records", help="folder: one file of batches per rank")
parser.add_argument("checkpoint", help="where rank 0 writes the loader's state")
parser.add_argument("--batch-size", type=int, required=True)
parser.add_argument("--epochs", type=int, required=True)
parser.add_argument("--resume-from", default="")
parser.add_argument("--die-after", type=int, default=0)
args = parser.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
loader = heterodl.RemoteDataLoader(args.servers, batch_size=args.batch_size,
                                   pipeline="random_resized_crop(16)", seed=11,
                                   pin_memory=False)
assert (loader.rank, loader.world_size) == (rank, world)  # taken from torch.distributed
start_epoch = 0
if args.resume_from:
    state = torch.load(args.resume_from)
    loader.load_state_dict(state["loader"])
    start_epoch = state["loader"]["epoch"]

step = 0
os.makedirs(args.records, exist_ok=True)
with open(os.path.join(args.records, f"rank{rank}.jsonl"), "a") as records:
    for epoch in range(start_epoch, args.epochs):
        loader.sampler.set_epoch(epoch)
        batches = len(loader)
        for batch in loader:
            records.write(json.dumps({"world": world, "rank": rank, "epoch": epoch,
                                      "index": batch.index, "batches": batches,
                                      "indices": batch.indices.tolist()}) + "\n")
            records.flush()
            total = torch.tensor([len(batch)])
            dist.all_reduce(total)  # what a DDP step's gradient reduction does
            step += 1
            if rank == 0:
                temporary = args.checkpoint + ".tmp"
                torch.save({"loader": loader.state_dict()}, temporary)
                os.replace(temporary, args.checkpoint)
            if step == args.die_after:
                dist.barrier()  # every rank has recorded the step
                os._exit(0)
dist.destroy_process_group()
