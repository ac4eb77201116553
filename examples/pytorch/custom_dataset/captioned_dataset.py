"""A Dataset whose samples are dicts with a variable-length tensor: an
image, its caption's tokens (as many as the caption has characters) and its
label. The tokens are declared ragged (`ragged_fields`), so a batch holds
each sample's tokens as they are: `batch["tokens"]` is a list of B int64
tensors, the other fields are stacked as default_collate stacks them.
padded_captions.py batches the same samples with a collate_fn instead.

    CUSTOM_DATASET_ROOT=data/sample heterodl serve \\
        --python-dataset captioned_dataset:train_set \\
        --python-path examples/pytorch/custom_dataset --port 50052 &
    python examples/pytorch/custom_dataset/read_captioned.py --servers 127.0.0.1:50052
"""

import os

import torch
from torchvision import datasets
from torchvision.transforms import v2


class Captioned(torch.utils.data.Dataset):
    # The fields whose first dimension varies from sample to sample.
    ragged_fields = ("tokens",)

    def __init__(self, root: str, size: int):
        self.images = datasets.ImageFolder(root, transform=v2.Compose([
            v2.RandomResizedCrop(size, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.PILToTensor(),
        ]))
        self.classes = self.images.classes

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> dict:
        image, label = self.images[index]
        caption = f"a photo of {self.classes[label]}"
        if torch.rand(()) < 0.5:  # seeded per sample: the same on every server
            caption += ", seen by heterodl"
        tokens = torch.tensor(list(caption.encode()), dtype=torch.int64)
        return {"image": image, "tokens": tokens, "label": label}


def options() -> tuple:
    """The images' folder and size, from the environment the server's
    workers inherit."""
    return (os.environ.get("CUSTOM_DATASET_ROOT", "data/sample"),
            int(os.environ.get("CUSTOM_DATASET_SIZE", "224")))


def train_set() -> Captioned:
    return Captioned(*options())
