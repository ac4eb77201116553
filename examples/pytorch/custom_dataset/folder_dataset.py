"""A team's own Dataset, as it would feed a DataLoader: torchvision's
ImageFolder with torchvision.transforms.v2, served as it is by the data
group (`heterodl serve --python-dataset`), not rewritten as a pipeline.

    CUSTOM_DATASET_ROOT=data/sample heterodl serve \\
        --python-dataset folder_dataset:train_set \\
        --python-path examples/pytorch/custom_dataset --port 50051 &
    python examples/pytorch/train_resnet18.py --servers 127.0.0.1:50051 --pipeline ''

The server runs `train_set()` in its worker processes; each `__getitem__`
draws its crop and flip from generators heterodl seeds from (seed, epoch,
index), so every server makes the same sample. A sample is (image uint8
[H, W, 3], label): the layout heterodl's own batches have, so the same
training loop reads either, and `heterodl local --python-dataset` trains
on it as on a folder.
"""

import os

import torch
from torchvision import datasets
from torchvision.transforms import v2


def _channels_last(image: torch.Tensor) -> torch.Tensor:
    """[3, H, W] -> [H, W, 3], as the training loop expects its batches."""
    return image.permute(1, 2, 0).contiguous()


def train_set() -> datasets.ImageFolder:
    """The folder at $CUSTOM_DATASET_ROOT, cropped to $CUSTOM_DATASET_SIZE
    (default 224) as torchvision's classification reference trains."""
    root = os.environ.get("CUSTOM_DATASET_ROOT", "data/sample")
    size = int(os.environ.get("CUSTOM_DATASET_SIZE", "224"))
    transform = v2.Compose([
        v2.RandomResizedCrop(size, antialias=True),
        v2.RandomHorizontalFlip(),
        v2.PILToTensor(),
        v2.Lambda(_channels_last),
    ])
    return datasets.ImageFolder(root, transform=transform)
