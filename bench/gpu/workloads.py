"""The workloads beyond classification on a GPU, fed two ways side by side:
by heterodl's Python loader (the pip wheel, its servers doing the recipe)
and by PyTorch's DataLoader doing the same recipe with torchvision
(torchvision.io decode + transforms.v2, tv_tensors moving masks and boxes)
in worker processes on the trainer's host. bf16 autocast, channels_last
where the model is convolutional; the loss is read every step, so each step
ends with the GPU's work done.

    segmentation  DeepLabV3-ResNet50, 512x1024 crops of 1024x2048 street-sized
                  images with masks: random_resize(512, 2048), random_crop
                  (pad_if_needed, masks padded with 255), hflip
    detection     Faster R-CNN ResNet-50 FPN, the references' "lsj" recipe:
                  scale_jitter(1024x1024, 0.1-2.0), random_crop(1024x1024,
                  pad_if_needed), hflip; boxes moved and clipped with the image
    dino          a ViT-S/16 DINO step on multi-crop views: 2 x 224 global and
                  8 x 96 local (jitter, grayscale, blur, solarize)

    python workloads.py --workload segmentation --feed heterodl --servers H:P ...
    python workloads.py --workload segmentation --feed dataloader --data DIR --workers N ...

Writes the per-step record, as torch_train.py does: {"steps": [[epoch,
step_ms, data_wait_ms], ...], "batch_size": B}.
"""

import argparse
import json
import os
import random
import sys
import time

import torch
import torch.nn.functional as F
import torchvision
from torch.utils.data import DataLoader, Dataset
from torchvision import tv_tensors
from torchvision.transforms import v2

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "pytorch"))

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)

# The recipes, as heterodl pipelines and as torchvision v2 transforms with the
# same parameters.
SEG_CROP = (512, 1024)
DET_SIZE = 1024
DINO_GLOBAL, DINO_LOCAL, DINO_LOCAL_CROPS = 224, 96, 8


def seg_pipeline():
    return (f"random_resize(512,2048)|random_crop({SEG_CROP[0]}x{SEG_CROP[1]},"
            f"pad_if_needed=true)|hflip(0.5)")


def det_pipeline():
    return (f"scale_jitter({DET_SIZE}x{DET_SIZE},scale_range=0.1:2)|"
            f"random_crop({DET_SIZE}x{DET_SIZE},pad_if_needed=true)|hflip(0.5)")


def dino_views():
    from train_dino import dino_views as views  # the example's recipe
    return views(DINO_GLOBAL, DINO_LOCAL, DINO_LOCAL_CROPS)


def read_image(path, mode=torchvision.io.ImageReadMode.RGB):
    return torchvision.io.decode_image(torchvision.io.read_file(path), mode=mode)


class Segmentation(Dataset):
    """images/NAME.jpg + masks/NAME.png, as heterodl's segmentation folder."""

    def __init__(self, root):
        names = sorted(os.listdir(os.path.join(root, "images")))
        self.pairs = [(os.path.join(root, "images", n),
                       os.path.join(root, "masks", os.path.splitext(n)[0] + ".png"))
                      for n in names]
        self.transform = v2.Compose([
            v2.RandomResize(512, 2048),
            v2.RandomCrop(SEG_CROP, pad_if_needed=True,
                          fill={tv_tensors.Image: 0, tv_tensors.Mask: 255}),
            v2.RandomHorizontalFlip()])

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, index):
        image_path, mask_path = self.pairs[index]
        image = tv_tensors.Image(read_image(image_path))
        mask = tv_tensors.Mask(read_image(mask_path, torchvision.io.ImageReadMode.GRAY)[0])
        image, mask = self.transform(image, mask)
        return image, mask


class Detection(Dataset):
    """A COCO instances file's images and boxes (CocoDetection's order)."""

    def __init__(self, annotations):
        with open(annotations) as f:
            coco = json.load(f)
        root = os.path.dirname(annotations)
        boxes = {}
        for annotation in coco["annotations"]:
            x, y, w, h = annotation["bbox"]
            boxes.setdefault(annotation["image_id"], []).append(
                ([x, y, x + w, y + h], annotation["category_id"]))
        self.images = [(os.path.join(root, image["file_name"]), boxes.get(image["id"], []))
                       for image in sorted(coco["images"], key=lambda i: i["id"])]
        self.transform = v2.Compose([
            v2.ScaleJitter((DET_SIZE, DET_SIZE), scale_range=(0.1, 2.0)),
            v2.RandomCrop((DET_SIZE, DET_SIZE), pad_if_needed=True),
            v2.RandomHorizontalFlip(),
            v2.SanitizeBoundingBoxes()])

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        path, objects = self.images[index]
        image = tv_tensors.Image(read_image(path))
        boxes = tv_tensors.BoundingBoxes(
            torch.tensor([box for box, _ in objects], dtype=torch.float32).reshape(-1, 4),
            format="XYXY", canvas_size=tuple(image.shape[-2:]))
        target = {"boxes": boxes,
                  "labels": torch.tensor([label for _, label in objects], dtype=torch.int64)}
        image, target = self.transform(image, target)
        return image, target


class Views(Dataset):
    """DataAugmentationDINO's multi-crop with v2 transforms, per view; the
    image decoded once (as heterodl cuts every view from one decode)."""

    def __init__(self, files):
        self.paths = files

        def group(size, scale, solarize):
            steps = [v2.RandomResizedCrop(size, scale=scale), v2.RandomHorizontalFlip(),
                     v2.RandomApply([v2.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
                     v2.RandomGrayscale(0.2),
                     v2.RandomApply([v2.GaussianBlur(23, sigma=(0.1, 2.0))], p=0.5)]
            if solarize:
                steps.append(v2.RandomSolarize(128, p=0.1))
            return v2.Compose(steps)
        self.global_view = group(DINO_GLOBAL, (0.4, 1.0), True)
        self.local_view = group(DINO_LOCAL, (0.05, 0.4), False)

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        image = read_image(self.paths[index])
        return (torch.stack([self.global_view(image) for _ in range(2)]),
                torch.stack([self.local_view(image) for _ in range(DINO_LOCAL_CROPS)]))


def normalize(images, device):
    """uint8 NCHW (or NHWC when `channels_last_input`) on the host to float
    NCHW on the device, normalized, channels-last in memory."""
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255
    x = images.to(device, non_blocking=True).float()
    return ((x - mean) / std).contiguous(memory_format=torch.channels_last)


class Segmenter:
    def __init__(self, device, classes):
        self.model = torchvision.models.segmentation.deeplabv3_resnet50(
            weights=None, weights_backbone=None, num_classes=classes).to(device)
        self.model = self.model.to(memory_format=torch.channels_last)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.02, momentum=0.9,
                                         weight_decay=1e-4)
        self.device = device

    def step(self, batch, heterodl_batch):
        if heterodl_batch:
            images, masks = batch
            x = normalize(images.permute(0, 3, 1, 2), self.device)
        else:
            images, masks = batch
            x = normalize(images, self.device)
        y = masks.to(self.device, non_blocking=True).long()
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(self.model(x)["out"], y, ignore_index=255)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return loss


class Detector:
    def __init__(self, device, classes):
        self.model = torchvision.models.detection.fasterrcnn_resnet50_fpn(
            weights=None, weights_backbone=None, num_classes=classes).to(device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.02, momentum=0.9,
                                         weight_decay=4e-5)
        self.device = device

    def step(self, batch, heterodl_batch):
        images, targets = batch
        if heterodl_batch:
            images = [image.permute(2, 0, 1) for image in images]
        x = [image.to(self.device, non_blocking=True).float() / 255 for image in images]
        y = []
        for target in targets:
            keep = target["iscrowd"] == 0 if "iscrowd" in target else slice(None)
            y.append({"boxes": torch.as_tensor(target["boxes"])[keep].to(self.device),
                      "labels": target["labels"][keep].to(self.device)})
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            losses = self.model(x, y)
        loss = sum(losses.values())
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return loss


class Dino:
    def __init__(self, device, classes):
        import copy
        from tiny_vit import TinyViT
        from train_dino import DinoHead, DinoLoss

        def network():  # ViT-S/16: 384 wide, 12 blocks of 6 heads
            backbone = TinyViT(image_size=DINO_GLOBAL, patch_size=16, dim=384, depth=12, heads=6)
            return torch.nn.Sequential(backbone, DinoHead(384, 65536, hidden=2048,
                                                          bottleneck=256)).to(device)
        self.student = network()
        self.teacher = copy.deepcopy(self.student)
        for parameter in self.teacher.parameters():
            parameter.requires_grad = False
        self.optimizer = torch.optim.AdamW(self.student.parameters(), lr=5e-4,
                                           weight_decay=0.04)
        self.loss = DinoLoss(65536).to(device)
        self.device = device

    def as_input(self, views, heterodl_batch):
        if heterodl_batch:  # [B, count, H, W, 3]
            views = views.permute(0, 1, 4, 2, 3)
        batch, count = views.shape[:2]
        views = views.to(self.device, non_blocking=True).transpose(0, 1)
        return normalize(views.reshape(count * batch, *views.shape[2:]), self.device)

    def step(self, batch, heterodl_batch):
        if heterodl_batch:
            groups = batch.views
        else:
            groups = list(batch)
        global_views = self.as_input(groups[0], heterodl_batch)
        local_views = self.as_input(groups[1], heterodl_batch)
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            student_out = torch.cat([self.student(global_views), self.student(local_views)])
            with torch.no_grad():
                teacher_out = self.teacher(global_views)
            loss = self.loss(student_out.float(), teacher_out.float(), 2 + DINO_LOCAL_CROPS,
                             False)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        with torch.no_grad():
            torch._foreach_mul_(list(self.teacher.parameters()), 0.996)
            torch._foreach_add_(list(self.teacher.parameters()),
                                list(self.student.parameters()), alpha=0.004)
        return loss


WORKLOADS = {"segmentation": Segmenter, "detection": Detector, "dino": Dino}


def heterodl_loader(args):
    import heterodl
    options = dict(servers=args.servers, batch_size=args.batch_size, seed=0, drop_last=True,
                   max_buffered_mb=4096.0, epochs=args.epochs)
    if args.workload == "segmentation":
        options["pipeline"] = seg_pipeline()
    elif args.workload == "detection":
        options["pipeline"] = det_pipeline()
    else:
        options["views"] = dino_views()
    loader = heterodl.RemoteDataLoader(**options)
    return loader, len(loader.dataset.classes)


def dataloader(args):
    if args.workload == "segmentation":
        dataset = Segmentation(args.data)
        classes_file = os.path.join(args.data, "classes.txt")
        with open(classes_file) as f:
            classes = len([line for line in f if line.strip()])
        collate = None
    elif args.workload == "detection":
        dataset = Detection(args.data)
        with open(args.data) as f:
            classes = 1 + max(c["id"] for c in json.load(f)["categories"])
        collate = lambda batch: tuple(zip(*batch))  # noqa: E731 (the references' collate)
    else:
        with open(args.data) as f:
            dataset = Views([line.split("\t")[0] for line in f if line.strip()])
        classes = 0
        collate = None
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, drop_last=True,
                        num_workers=args.workers, pin_memory=args.device == "cuda",
                        persistent_workers=True, prefetch_factor=4, collate_fn=collate)
    return loader, classes


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), required=True,
                        help="what to train")
    parser.add_argument("--feed", choices=["heterodl", "dataloader"], required=True,
                        help="heterodl's Python loader, or a DataLoader doing the same recipe")
    parser.add_argument("--servers", default="", help="--feed heterodl: host:port,...")
    parser.add_argument("--data", default="",
                        help="--feed dataloader: the segmentation folder, the COCO file, or "
                             "the list of image paths")
    parser.add_argument("--workers", type=int, default=15, help="DataLoader workers")
    parser.add_argument("--batch-size", type=int, default=8, help="samples per batch")
    parser.add_argument("--epochs", type=int, default=2, help="epochs to train")
    parser.add_argument("--max-steps", type=int, default=0,
                        help="stop each epoch after this many steps (0: the whole epoch)")
    parser.add_argument("--out", required=True, help="the record to write")
    parser.add_argument("--device", default="cuda",
                        help="cuda, or cpu to try the script without a GPU")
    args = parser.parse_args()
    random.seed(0)
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    device = torch.device(args.device)
    is_heterodl = args.feed == "heterodl"
    loader, classes = heterodl_loader(args) if is_heterodl else dataloader(args)
    trainer = WORKLOADS[args.workload](device, max(classes, 2))
    steps = []
    for epoch in range(args.epochs):
        if is_heterodl:
            loader.sampler.set_epoch(epoch)
        last = time.perf_counter()
        iterator = iter(loader)
        for k in range(len(loader)):
            if args.max_steps and k >= args.max_steps:
                break
            before = time.perf_counter()
            batch = next(iterator)
            waited = time.perf_counter() - before
            loss = trainer.step(batch, is_heterodl)
            loss.item()  # the step's work done, as heterodl's trainer reads it
            now = time.perf_counter()
            steps.append([epoch, (now - last) * 1000, waited * 1000])
            last = now
        del iterator
    with open(args.out, "w") as f:
        json.dump({"steps": steps, "batch_size": args.batch_size,
                   "workload": args.workload, "feed": args.feed}, f)


if __name__ == "__main__":
    main()
