"""Semantic segmentation with torchvision's DeepLabV3 (or FCN), fed by heterodl.

The training loop of torchvision's segmentation references, with the data
loading replaced: the lines marked HETERODL stand where the script had a
VOC/COCO Dataset with joint image+mask transforms and a DataLoader. The
`heterodl serve` processes decode image and mask, and move the mask with its
image through every geometric operation (nearest-neighbour; padding filled
with 255, which the loss ignores), as the references' transforms do:

    reference                                   heterodl pipeline
    RandomResize(0.5 * base, 2 * base)          random_resize(base/2,2*base)
    RandomHorizontalFlip(0.5)                   hflip(0.5)
    RandomCrop(crop, fill=255 for masks)        random_crop(CxC,pad_if_needed=true)

A batch unpacks as (images, masks): uint8 [B, H, W, 3] and [B, H, W].

    heterodl dataset sample data/seg --task segmentation
    heterodl serve --dataset data/seg --port 50051 &
    python examples/pytorch/train_segmentation.py --servers 127.0.0.1:50051 \\
        --num-classes 4 --crop-size 128 --steps 20 --eval

With --eval it evaluates after every epoch on `resize(base)|center_crop(C)`
(the references evaluate whole images one at a time; a batch here is one
size): pixel accuracy and mean IoU over every sample once, pixels of the
ignore index left out. Under torchrun it trains data-parallel.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision

import heterodl  # HETERODL

IGNORE_INDEX = 255  # what heterodl serve fills padding with (serve --ignore-index)


def evaluate(model, loader, device, mean, std, num_classes, rank, world_size, distributed):
    """Pixel accuracy and mean IoU from a confusion matrix over every sample
    once (DistributedSampler's padding repeats are left out)."""
    model.eval()
    confusion = torch.zeros(num_classes, num_classes, dtype=torch.int64, device=device)
    position = 0
    with torch.no_grad():
        for images, masks in loader:
            images = images.to(device, non_blocking=True).permute(0, 3, 1, 2).float()
            predictions = model((images / 255 - mean) / std)["out"].argmax(1)
            masks = masks.to(device, non_blocking=True).long()
            for i in range(len(masks)):
                if (position + i) * world_size + rank >= len(loader.dataset):
                    continue  # a padding repeat
                counted = masks[i] != IGNORE_INDEX
                pairs = masks[i][counted] * num_classes + predictions[i][counted]
                confusion += torch.bincount(pairs, minlength=num_classes ** 2).view(
                    num_classes, num_classes)
            position += len(masks)
    if distributed:
        dist.all_reduce(confusion)
    model.train()
    confusion = confusion.double()
    accuracy = (confusion.diag().sum() / confusion.sum().clamp(min=1)).item()
    union = confusion.sum(0) + confusion.sum(1) - confusion.diag()
    present = union > 0
    iou = confusion.diag()[present] / union[present]
    return accuracy, iou.mean().item() if len(iou) else 0.0


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--servers", required=True, help="host:port,host:port")
    parser.add_argument("--num-classes", type=int, default=0,
                        help="classes of the dataset's masks (ids 0 to N-1; 255 is ignored); "
                             "0: the served dataset's, len(loader.dataset.classes)")
    parser.add_argument("--model", default="deeplabv3_resnet50",
                        choices=["deeplabv3_resnet50", "deeplabv3_resnet101",
                                 "deeplabv3_mobilenet_v3_large", "fcn_resnet50", "fcn_resnet101",
                                 "lraspp_mobilenet_v3_large"],
                        help="a torchvision segmentation model")
    parser.add_argument("--batch-size", type=int, default=8,
                        help="samples per batch, per rank")
    parser.add_argument("--crop-size", type=int, default=480,
                        help="side of the training crops")
    parser.add_argument("--epochs", type=int, default=1,
                        help="epochs to train")
    parser.add_argument("--steps", type=int, default=0, help="stop after this many steps")
    parser.add_argument("--lr", type=float, default=0.02,
                        help="learning rate")
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

    # HETERODL: the references' joint transforms, run on the data servers.
    crop = args.crop_size
    base = crop * 520 // 480  # the references' base size for a 480 crop
    loader = heterodl.RemoteDataLoader(
        servers=args.servers, batch_size=args.batch_size, seed=0,
        pipeline=f"random_resize({base // 2},{base * 2})|"
                 f"random_crop({crop}x{crop},pad_if_needed=true)|hflip(0.5)")
    eval_loader = heterodl.RemoteDataLoader(
        servers=args.servers, batch_size=args.batch_size, shuffle=False,
        pipeline=f"resize({base})|center_crop({crop}x{crop})") if args.eval else None

    num_classes = args.num_classes or len(loader.dataset.classes)
    model = getattr(torchvision.models.segmentation, args.model)(
        weights=None, weights_backbone=None, num_classes=num_classes).to(device)
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1)

    step = 0
    model.train()
    for epoch in range(args.epochs):
        loader.sampler.set_epoch(epoch)
        for images, masks in loader:  # HETERODL: uint8 NHWC images, uint8 [B, H, W] masks
            start = time.perf_counter()
            images = images.to(device, non_blocking=True).permute(0, 3, 1, 2).float()
            images = (images / 255 - mean) / std
            masks = masks.to(device, non_blocking=True).long()

            loss = F.cross_entropy(model(images)["out"], masks, ignore_index=IGNORE_INDEX)
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
            accuracy, miou = evaluate(model, eval_loader, device, mean, std, num_classes,
                                      rank, world_size, distributed)
            if rank == 0:
                print(f"epoch {epoch} eval: pixel accuracy {100 * accuracy:.1f}%, "
                      f"mIoU {100 * miou:.1f}%", flush=True)
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
