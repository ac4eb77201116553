"""Object detection with torchvision's Faster R-CNN (or RetinaNet), fed by heterodl.

The training loop of torchvision's detection references, with the data
loading replaced: the lines marked HETERODL stand where the script had a
CocoDetection dataset, its joint transforms and a DataLoader with a
collate_fn. The `heterodl serve` processes read the COCO instances file,
decode the images and move every box with its image (clipped to it; boxes
left under a pixel wide dropped), as the references' "lsj" recipe does:

    reference (--data-augmentation lsj)         heterodl pipeline
    ScaleJitter((S, S), scale_range=(a, b))     scale_jitter(SxS,scale_range=a:b)
    FixedSizeCrop((S, S))                        random_crop(SxS,pad_if_needed=true)
    RandomHorizontalFlip(0.5)                    hflip(0.5)

A batch unpacks as (images, targets): uint8 [B, S, S, 3], and per image
{"boxes": float32 [n, 4] xyxy, "labels": int64 [n], "iscrowd": uint8 [n]},
which is what torchvision's detection models take.

    heterodl dataset sample data/det --task detection
    heterodl serve --dataset data/det/annotations.json --port 50051 &
    python examples/pytorch/train_detection.py --servers 127.0.0.1:50051 --steps 20 --eval

With --eval it evaluates after every epoch on `resize(SxS)` over every sample
once: detections scored over 0.5 against the ground truth at IoU 0.5
(recall and precision; COCO's mAP needs pycocotools). Under torchrun it
trains data-parallel.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torchvision
from torchvision.ops import box_iou

import heterodl  # HETERODL


def to_model(images, targets, device):
    """A batch as torchvision's detection models take it: float [0, 1] CHW
    images, and targets without crowd regions (the references drop them)."""
    images = [image.to(device, non_blocking=True).permute(2, 0, 1).float() / 255
              for image in images]
    kept = []
    for target in targets:
        solid = target["iscrowd"] == 0
        kept.append({"boxes": target["boxes"][solid].to(device),
                     "labels": target["labels"][solid].to(device)})
    return images, kept


def evaluate(model, loader, device, rank, world_size, distributed):
    """Recall and precision at IoU 0.5 of detections scored over 0.5, every
    sample once (DistributedSampler's padding repeats are left out)."""
    model.eval()
    counts = torch.zeros(3, dtype=torch.int64, device=device)  # [matched, truths, detections]
    position = 0
    with torch.no_grad():
        for images, targets in loader:
            images, targets = to_model(images, targets, device)
            outputs = model(images)
            for i, (output, target) in enumerate(zip(outputs, targets)):
                if (position + i) * world_size + rank >= len(loader.dataset):
                    continue  # a padding repeat
                detected = output["boxes"][output["scores"] > 0.5]
                labels = output["labels"][output["scores"] > 0.5]
                if len(detected) and len(target["boxes"]):
                    same = labels[:, None] == target["labels"][None, :]
                    hits = (box_iou(detected, target["boxes"]) >= 0.5) & same
                    counts[0] += int(hits.any(0).sum())
                counts[1] += len(target["boxes"])
                counts[2] += len(detected)
            position += len(images)
    if distributed:
        dist.all_reduce(counts)
    model.train()
    matched, truths, detections = (int(c) for c in counts)
    return matched / max(truths, 1), matched / max(detections, 1)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--servers", required=True, help="host:port,host:port")
    parser.add_argument("--model", default="fasterrcnn_resnet50_fpn",
                        choices=["fasterrcnn_resnet50_fpn", "fasterrcnn_mobilenet_v3_large_fpn",
                                 "fasterrcnn_mobilenet_v3_large_320_fpn", "retinanet_resnet50_fpn"],
                        help="a torchvision detection model")
    parser.add_argument("--batch-size", type=int, default=4,
                        help="samples per batch, per rank")
    parser.add_argument("--size", type=int, default=1024, help="side of the square crops")
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

    # HETERODL: the references' "lsj" joint transforms, run on the data servers.
    size = args.size
    loader = heterodl.RemoteDataLoader(
        servers=args.servers, batch_size=args.batch_size, seed=0,
        pipeline=f"scale_jitter({size}x{size},scale_range=0.3:2)|"
                 f"random_crop({size}x{size},pad_if_needed=true)|hflip(0.5)")
    eval_loader = heterodl.RemoteDataLoader(
        servers=args.servers, batch_size=args.batch_size, shuffle=False,
        pipeline=f"resize({size}x{size})") if args.eval else None

    # Labels are the dataset's category ids (COCO's run to 90): one class
    # per id, 0 the background.
    model = getattr(torchvision.models.detection, args.model)(
        weights=None, weights_backbone=None, num_classes=len(loader.dataset.classes),
        min_size=size, max_size=size).to(device)
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(model)
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(parameters, lr=args.lr, momentum=0.9, weight_decay=1e-4)

    step = 0
    model.train()
    for epoch in range(args.epochs):
        loader.sampler.set_epoch(epoch)
        for images, targets in loader:  # HETERODL: uint8 NHWC images, per-image target dicts
            start = time.perf_counter()
            images, targets = to_model(images, targets, device)
            losses = model(images, targets)
            loss = sum(losses.values())
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
            recall, precision = evaluate(model, eval_loader, device, rank, world_size,
                                         distributed)
            if rank == 0:
                print(f"epoch {epoch} eval: recall {100 * recall:.1f}%, "
                      f"precision {100 * precision:.1f}% (IoU 0.5, score 0.5)", flush=True)
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
