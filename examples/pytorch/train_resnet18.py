"""A standard PyTorch training script whose DataLoader is heterodl's.

Everything here is the usual torchvision ResNet-18 loop over a DataLoader of
a DistributedSampler; the lines marked HETERODL replace
`torchvision.datasets.ImageFolder` + `DataLoader` (and its decode/augment
workers) with batches decoded by `heterodl serve` processes. The loop itself
is unchanged: `loader.sampler.set_epoch(epoch)`, `for images, labels in
loader`.

    pip install dist/heterodl-*.whl        # bash scripts/build_wheel.sh makes it
    heterodl serve --dataset data/sample --port 50051 &
    python examples/pytorch/train_resnet18.py --servers 127.0.0.1:50051 --steps 20

Under torchrun it trains data-parallel: each rank gets its own shard. At the
end rank 0 tells the data servers to shut down (--keep-servers leaves them).

With --eval it evaluates after every epoch the way torchvision's reference
scripts do: `resize(256)|center_crop(224)` (scaled to --image-size), every
sample once, in dataset order (`shuffle=False`), nothing dropped.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision

import heterodl  # HETERODL


def evaluate(model, loader, device, mean, std, rank, world_size, distributed):
    """Top-1 accuracy over every sample once. Ranks split the dataset as
    DistributedSampler does: without drop_last the last samples are padded
    by repeating the first ones, and those repeats are not counted."""
    model.eval()
    correct = torch.zeros(2, dtype=torch.int64, device=device)  # [correct, counted]
    position = 0  # of this rank's samples: position * world_size + rank in the padded order
    with torch.no_grad():
        for batch in loader:
            images = batch.images.to(device, non_blocking=True).permute(0, 3, 1, 2).float()
            predictions = model((images / 255 - mean) / std).argmax(1).cpu()
            for i in range(len(batch)):
                if (position + i) * world_size + rank < len(loader.dataset):
                    correct[0] += int(predictions[i] == batch.labels[i])
                    correct[1] += 1
            position += len(batch)
    if distributed:
        dist.all_reduce(correct)
    model.train()
    return int(correct[0]), int(correct[1])


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--servers", required=True, help="host:port,host:port")
    parser.add_argument("--batch-size", type=int, default=32,
                        help="samples per batch, per rank")
    parser.add_argument("--epochs", type=int, default=1,
                        help="epochs to train")
    parser.add_argument("--steps", type=int, default=0, help="stop after this many steps")
    parser.add_argument("--lr", type=float, default=0.1,
                        help="learning rate")
    parser.add_argument("--image-size", type=int, default=224,
                        help="side of the training crops")
    parser.add_argument("--pipeline", default=None,
                        help="the servers' augmentation (none given: random_resized_crop at "
                             "--image-size, hflip); '' for servers of your own dataset "
                             "(serve --python-dataset, custom_dataset/), whose samples come "
                             "ready")
    parser.add_argument("--eval", action="store_true", help="evaluate after every epoch")
    parser.add_argument("--keep-servers", action="store_true",
                        help="leave the data servers running at the end (otherwise rank 0 "
                             "shuts them down, so the data group exits with the job)")
    args = parser.parse_args()

    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank = dist.get_rank() if distributed else 0
    world_size = dist.get_world_size() if distributed else 1
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) \
        if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)

    # HETERODL: instead of ImageFolder(transform=...) + DataLoader(num_workers=...,
    # sampler=DistributedSampler(...)); rank and world size come from
    # torch.distributed, as a DistributedSampler's do.
    pipeline = f"random_resized_crop({args.image_size})|hflip(0.5)" if args.pipeline is None \
        else args.pipeline
    loader = heterodl.RemoteDataLoader(
        servers=args.servers, batch_size=args.batch_size, pipeline=pipeline, seed=0)

    # HETERODL: the evaluation loader, as DataLoader(shuffle=False) with the
    # validation transforms.
    resize = args.image_size * 256 // 224
    eval_loader = heterodl.RemoteDataLoader(
        servers=args.servers, batch_size=args.batch_size,
        pipeline=f"resize({resize})|center_crop({args.image_size})",
        shuffle=False) if args.eval else None

    model = torchvision.models.resnet18(num_classes=len(loader.dataset.classes)).to(device)
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1)

    step = 0
    model.train()
    for epoch in range(args.epochs):
        loader.sampler.set_epoch(epoch)
        for images, labels in loader:
            start = time.perf_counter()
            # uint8 NHWC from the data servers -> normalized float NCHW on the device
            images = images.to(device, non_blocking=True).permute(0, 3, 1, 2).float()
            images = (images / 255 - mean) / std
            labels = labels.to(device, non_blocking=True)

            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

            step += 1
            if rank == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f} "
                      f"({(time.perf_counter() - start) * 1000:.0f} ms)", flush=True)
            if args.steps and step >= args.steps:
                break
        if eval_loader is not None:
            eval_loader.set_epoch(epoch)
            correct, counted = evaluate(model, eval_loader, device, mean, std, rank, world_size,
                                        distributed)
            if rank == 0:
                print(f"epoch {epoch} eval: {correct}/{counted} correct "
                      f"({100.0 * correct / counted:.1f}%)", flush=True)
        if args.steps and step >= args.steps:
            break
    if distributed:
        dist.barrier()  # every rank is done with the servers
    # HETERODL: the data group exits now, not at its idle timeout.
    if rank == 0 and not args.keep_servers:
        loader.shutdown_servers()
    if distributed:
        # DDP's reducer holds the process group: dropped first, it leaves the
        # group's end to destroy_process_group, which waits for Gloo's worker
        # threads without holding the GIL. The other order can hang at exit: a
        # worker thread still releasing a finished collective's tensors needs
        # the GIL the reducer's destructor holds (pytorch/pytorch#56297).
        del model, optimizer
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
