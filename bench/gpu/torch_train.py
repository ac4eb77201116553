"""The PyTorch side of bench/gpu/run.sh: a torchvision ResNet trained in eager
PyTorch (bf16 autocast, channels_last, cuDNN autotuning, SGD with momentum,
the loss read every step as heterodl's trainer does), fed by a DataLoader
with N worker processes, by one GPU-resident synthetic batch, or by heterodl
servers through the Python package (the pip wheel, pinned memory): the
"existing PyTorch trainer" path of the README.

    python torch_train.py --model resnet18 --feed dataloader --decoder pil|tensor
                          --workers N --files LIST --batch-size B --epochs E --out F.json
    python torch_train.py --model resnet50 --feed synthetic --images N ...
    python torch_train.py --model resnet18 --feed heterodl --servers HOST:PORT ...

Writes the per-step record: {"steps": [[epoch, step_ms, data_wait_ms], ...]}.
"""

import argparse
import json
import time

import torch
import torchvision
from torch.utils.data import DataLoader, Dataset

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255


class Images(Dataset):
    """RandomResizedCrop(224) + flip, uint8 CHW out, as heterodl delivers."""

    def __init__(self, paths, labels, decoder):
        self.paths, self.labels, self.decoder = paths, labels, decoder
        self.transform = None

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        if self.transform is None:
            if self.decoder == "pil":
                from torchvision import transforms
                self.transform = transforms.Compose([
                    transforms.RandomResizedCrop(224, antialias=True),
                    transforms.RandomHorizontalFlip(), transforms.PILToTensor()])
            else:
                from torchvision.transforms import v2
                self.transform = v2.Compose([v2.RandomResizedCrop(224, antialias=True),
                                             v2.RandomHorizontalFlip()])
        if self.decoder == "pil":
            from PIL import Image
            with Image.open(self.paths[index]) as image:
                return self.transform(image.convert("RGB")), self.labels[index]
        data = torchvision.io.read_file(self.paths[index])
        image = torchvision.io.decode_image(data, mode=torchvision.io.ImageReadMode.RGB)
        return self.transform(image), self.labels[index]


def read_files(path):
    paths, labels = [], []
    with open(path) as f:
        for line in f:
            file, _, label = line.rstrip("\n").partition("\t")
            if file:
                paths.append(file)
                labels.append(int(label or 0))
    return paths, labels


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--feed", choices=["dataloader", "synthetic", "heterodl"],
                        default="dataloader")
    parser.add_argument("--servers", default="", help="--feed heterodl: host:port,...")
    parser.add_argument("--decoder", choices=["pil", "tensor"], default="pil")
    parser.add_argument("--workers", type=int, default=15)
    parser.add_argument("--files", default="")
    parser.add_argument("--images", type=int, default=10800)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    device = torch.device(args.device)
    # What a PyTorch expert turns on: cuDNN autotuning and channels_last.
    torch.backends.cudnn.benchmark = True
    if args.feed == "dataloader":
        paths, labels = read_files(args.files)
        classes = max(labels) + 1
        loader = DataLoader(Images(paths, labels, args.decoder), batch_size=args.batch_size,
                            shuffle=True, num_workers=args.workers, pin_memory=True,
                            persistent_workers=True, drop_last=False)
        epochs = lambda epoch: loader  # noqa: E731
    elif args.feed == "heterodl":
        import heterodl
        remote = heterodl.RemoteDataLoader(args.servers, batch_size=args.batch_size,
                                           pipeline="random_resized_crop(224)|hflip(0.5)")
        print(f"heterodl {heterodl.__version__} from {heterodl.__file__}, pinned: "
              f"{remote.pin_memory}", flush=True)
        classes = len(remote.dataset.classes)

        def epochs(epoch):
            remote.sampler.set_epoch(epoch)
            # uint8 NHWC viewed as NCHW: already channels_last in memory.
            return ((images.permute(0, 3, 1, 2), labels) for images, labels in remote)
    else:
        classes = 1000
        images = torch.randint(0, 256, (args.batch_size, 3, 224, 224), dtype=torch.uint8,
                               device=device)
        targets = torch.randint(0, classes, (args.batch_size,), device=device)
        steps = (args.images + args.batch_size - 1) // args.batch_size
        epochs = lambda epoch: ((images, targets) for _ in range(steps))  # noqa: E731
    model = getattr(torchvision.models, args.model)(num_classes=classes).to(
        device, memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    mean, std = MEAN.to(device), STD.to(device)
    records = []
    for epoch in range(args.epochs):
        end = time.perf_counter()
        for x, y in epochs(epoch):
            arrived = time.perf_counter()
            x = x.to(device, non_blocking=True).float().sub_(mean).div_(std)
            x = x.contiguous(memory_format=torch.channels_last)
            y = y.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss.item()
            now = time.perf_counter()
            records.append([epoch, (now - end) * 1000, (arrived - end) * 1000])
            end = now
    if args.feed == "heterodl":
        remote.shutdown_servers()
    with open(args.out, "w") as f:
        json.dump({"steps": records, "batch_size": args.batch_size}, f)


if __name__ == "__main__":
    main()
