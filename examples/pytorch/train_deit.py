"""DeiT-style supervised training of a small ViT, fed by heterodl.

The recipe of DeiT (Touvron et al., 2021) as timm and torchvision's
classification references run it, split where it belongs: the per-image
augmentation on the data servers, the batch-level mixing on the device.

    on the servers (HETERODL):  random_resized_crop(224)|hflip(0.5)|
                                rand_augment(num_ops=2,magnitude=9)|random_erasing(0.25)
    on the device:              torchvision.transforms.v2.RandomChoice(
                                    [MixUp(alpha=0.8), CutMix(alpha=1.0)])

MixUp and CutMix mix images and labels across a batch, so they run after
the batch arrives, on the GPU, with torchvision's own v2 classes (no
heterodl code): they take the float batch and the int64 labels and return
mixed images and soft targets [B, classes].

    heterodl dataset sample data/sample
    heterodl serve --dataset data/sample --port 50051 &
    python examples/pytorch/train_deit.py --servers 127.0.0.1:50051 --steps 20

Under torchrun it trains data-parallel.
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torchvision.transforms import v2

import heterodl  # HETERODL

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_vit import TinyViT  # noqa: E402


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--servers", required=True, help="host:port,host:port")
    parser.add_argument("--batch-size", type=int, default=32,
                        help="samples per batch, per rank")
    parser.add_argument("--image-size", type=int, default=224,
                        help="side of the training crops")
    parser.add_argument("--patch-size", type=int, default=16,
                        help="the ViT's patch side")
    parser.add_argument("--epochs", type=int, default=1,
                        help="epochs to train")
    parser.add_argument("--steps", type=int, default=0, help="stop after this many steps")
    parser.add_argument("--lr", type=float, default=5e-4,
                        help="peak learning rate")
    parser.add_argument("--mixup-alpha", type=float, default=0.8,
                        help="MixUp's Beta parameter (0: off)")
    parser.add_argument("--cutmix-alpha", type=float, default=1.0,
                        help="CutMix's Beta parameter (0: off)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the model and the mixing")
    parser.add_argument("--keep-servers", action="store_true",
                        help="leave the data servers running at the end (otherwise rank 0 "
                             "shuts them down, so the data group exits with the job)")
    args = parser.parse_args()

    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank = dist.get_rank() if distributed else 0
    torch.manual_seed(args.seed + rank)  # each rank mixes its own batches
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) \
        if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)

    # HETERODL: the per-image half of DeiT's recipe, on the data servers.
    size = args.image_size
    loader = heterodl.RemoteDataLoader(
        servers=args.servers, batch_size=args.batch_size, seed=0, drop_last=True,
        pipeline=f"random_resized_crop({size})|hflip(0.5)|"
                 f"rand_augment(num_ops=2,magnitude=9)|random_erasing(0.25)")
    num_classes = len(loader.dataset.classes)
    # The batch-level half, on the device: torchvision's MixUp / CutMix.
    mixup_cutmix = v2.RandomChoice([v2.MixUp(alpha=args.mixup_alpha, num_classes=num_classes),
                                    v2.CutMix(alpha=args.cutmix_alpha, num_classes=num_classes)])

    model = TinyViT(image_size=size, patch_size=args.patch_size,
                    num_classes=num_classes).to(device)
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05)
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1)

    step = 0
    model.train()
    for epoch in range(args.epochs):
        loader.sampler.set_epoch(epoch)
        for images, labels in loader:  # HETERODL: uint8 NHWC images, int64 labels
            start = time.perf_counter()
            images = images.to(device, non_blocking=True).permute(0, 3, 1, 2).float()
            images = (images / 255 - mean) / std
            labels = labels.to(device, non_blocking=True)
            images, targets = mixup_cutmix(images, labels)  # soft targets [B, classes]
            loss = torch.sum(-targets * F.log_softmax(model(images), dim=-1), dim=-1).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if rank == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f} "
                      f"mixed targets: largest {targets.max(dim=1).values.min().item():.2f} "
                      f"to {targets.max().item():.2f} "
                      f"({(time.perf_counter() - start) * 1000:.0f} ms)", flush=True)
            if args.steps and step >= args.steps:
                break
        if args.steps and step >= args.steps:
            break
    if distributed:
        dist.barrier()  # every rank is done with the servers
    # HETERODL: the data group exits now, not at its idle timeout.
    if rank == 0 and not args.keep_servers:
        loader.shutdown_servers()
    if distributed:
        # As in train_resnet18.py: DDP's reducer goes before the process group.
        del model, optimizer
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
