"""DINO-style self-supervised pre-training of a small ViT, fed by heterodl's
multi-crop views.

The loop of DINO (Caron et al., 2021): a student and a teacher (the
student's exponential moving average) see different views of each image;
the student learns to predict, from every view, the teacher's centred,
sharpened output on the other global views. The data loading is the line
marked HETERODL: where DINO's repository had an ImageFolder with its
DataAugmentationDINO (PIL, decoded once per image, then 2 global and N local
crops), the `heterodl serve` processes decode each image once and cut every
view from it, each with its own jitter, blur and solarize:

    global (2 x 224): random_resized_crop(scale 0.4-1), flip, color jitter
                      p=0.8, grayscale 0.2, blur p=1.0 / 0.1, solarize 0 / 0.2
    local (N x 96):   random_resized_crop(scale 0.05-0.4), the same, blur 0.5

DINO's two global views differ (blur 1.0 and 0.1, solarize only on the
second); views of one group share one pipeline here, so both global views
take blur p=0.5 and solarize p=0.1, the average of the two.

    heterodl dataset sample data/sample
    heterodl serve --dataset data/sample --port 50051 &
    python examples/pytorch/train_dino.py --servers 127.0.0.1:50051 --steps 20

A batch of views unpacks as (views, labels): views[0] is uint8
[B, 2, 224, 224, 3], views[1] [B, N, 96, 96, 3]; the labels are unused.
Under torchrun it trains data-parallel.
"""

import argparse
import copy
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import heterodl  # HETERODL

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_vit import TinyViT  # noqa: E402

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def dino_views(global_size, local_size, local_crops):
    """DINO's multi-crop recipe as heterodl view groups."""
    common = "hflip(0.5)|color_jitter(0.4,0.4,0.2,0.1,p=0.8)|grayscale(0.2)"
    return [(2, f"random_resized_crop({global_size},scale=0.4:1)|{common}|"
                f"gaussian_blur(23,p=0.5)|solarize(128,p=0.1)"),
            (local_crops, f"random_resized_crop({local_size},scale=0.05:0.4)|{common}|"
                          f"gaussian_blur(23,p=0.5)")]


class DinoHead(nn.Module):
    """DINO's projection head: an MLP to a bottleneck, L2-normalized, then a
    linear layer to `out_dim` prototypes."""

    def __init__(self, dim, out_dim, hidden=256, bottleneck=64):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, hidden),
                                 nn.GELU(), nn.Linear(hidden, bottleneck))
        self.last = nn.Linear(bottleneck, out_dim, bias=False)

    def forward(self, features):
        return self.last(F.normalize(self.mlp(features), dim=-1))


class DinoLoss(nn.Module):
    """Cross-entropy between the teacher's centred, sharpened softmax on
    each global view and the student's on every other view; the centre is a
    moving average of the teacher's outputs (all ranks')."""

    def __init__(self, out_dim, student_temp=0.1, teacher_temp=0.04, center_momentum=0.9):
        super().__init__()
        self.student_temp = student_temp
        self.teacher_temp = teacher_temp
        self.center_momentum = center_momentum
        self.register_buffer("center", torch.zeros(1, out_dim))

    def forward(self, student_out, teacher_out, views, distributed):
        student = (student_out / self.student_temp).chunk(views)
        teacher = F.softmax((teacher_out - self.center) / self.teacher_temp, dim=-1)
        teacher = teacher.detach().chunk(2)
        total, terms = 0.0, 0
        for t, target in enumerate(teacher):
            for v, prediction in enumerate(student):
                if v == t:
                    continue  # a view is never its own target
                total = total + torch.sum(-target * F.log_softmax(prediction, dim=-1),
                                          dim=-1).mean()
                terms += 1
        self.update_center(teacher_out, distributed)
        return total / terms

    @torch.no_grad()
    def update_center(self, teacher_out, distributed):
        center = teacher_out.sum(dim=0, keepdim=True)
        count = torch.tensor([len(teacher_out)], dtype=center.dtype, device=center.device)
        if distributed:
            dist.all_reduce(center)
            dist.all_reduce(count)
        self.center.mul_(self.center_momentum).add_(center / count,
                                                    alpha=1 - self.center_momentum)


def as_input(views, device, mean, std):
    """uint8 [B, count, H, W, 3] to float [count * B, 3, H, W], view-major
    (all images' first view, then their second...), as DINO chunks them."""
    views = views.to(device, non_blocking=True)
    batch, count, height, width, _ = views.shape
    views = views.permute(1, 0, 4, 2, 3).reshape(count * batch, 3, height, width).float()
    return (views / 255 - mean) / std


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--servers", required=True, help="host:port,host:port")
    parser.add_argument("--batch-size", type=int, default=16,
                        help="samples per batch, per rank")
    parser.add_argument("--global-size", type=int, default=224,
                        help="side of the two global views")
    parser.add_argument("--local-size", type=int, default=96,
                        help="side of the local views")
    parser.add_argument("--local-crops", type=int, default=8,
                        help="local views per image")
    parser.add_argument("--patch-size", type=int, default=16,
                        help="the ViT's patch side")
    parser.add_argument("--out-dim", type=int, default=4096,
                        help="the DINO head's output dimension")
    parser.add_argument("--epochs", type=int, default=1,
                        help="epochs to train")
    parser.add_argument("--steps", type=int, default=0, help="stop after this many steps")
    parser.add_argument("--lr", type=float, default=5e-4,
                        help="peak learning rate")
    parser.add_argument("--teacher-momentum", type=float, default=0.996,
                        help="the teacher's EMA momentum")
    parser.add_argument("--keep-servers", action="store_true",
                        help="leave the data servers running at the end (otherwise rank 0 "
                             "shuts them down, so the data group exits with the job)")
    args = parser.parse_args()

    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank = dist.get_rank() if distributed else 0
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) \
        if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)

    # HETERODL: DataAugmentationDINO's crops, every view cut from one decoding.
    loader = heterodl.RemoteDataLoader(
        servers=args.servers, batch_size=args.batch_size, seed=0,
        views=dino_views(args.global_size, args.local_size, args.local_crops))

    def network():
        backbone = TinyViT(image_size=args.global_size, patch_size=args.patch_size)
        return nn.Sequential(backbone, DinoHead(backbone.dim, args.out_dim)).to(device)

    student = network()
    teacher = copy.deepcopy(student)
    for parameter in teacher.parameters():
        parameter.requires_grad = False
    model = nn.parallel.DistributedDataParallel(student) if distributed else student
    optimizer = torch.optim.AdamW(student.parameters(), lr=args.lr, weight_decay=0.04)
    loss_fn = DinoLoss(args.out_dim).to(device)
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)

    step = 0
    for epoch in range(args.epochs):
        loader.sampler.set_epoch(epoch)
        for views, _ in loader:  # HETERODL: [global views, local views], uint8 NHWC
            start = time.perf_counter()
            global_views = as_input(views[0], device, mean, std)
            local_views = as_input(views[1], device, mean, std)
            # The student sees every view, the teacher the global ones.
            student_out = torch.cat([model(global_views), model(local_views)])
            with torch.no_grad():
                teacher_out = teacher(global_views)
            loss = loss_fn(student_out, teacher_out, 2 + args.local_crops, distributed)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            with torch.no_grad():  # the teacher follows the student
                for ours, theirs in zip(student.parameters(), teacher.parameters()):
                    theirs.mul_(args.teacher_momentum).add_(ours.detach(),
                                                            alpha=1 - args.teacher_momentum)
            step += 1
            if rank == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f} "
                      f"views {tuple(global_views.shape)} + {tuple(local_views.shape)} "
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
