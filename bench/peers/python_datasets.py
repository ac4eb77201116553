"""Datasets for `heterodl bench feed --python-dataset`: a user's own PyTorch
Dataset as a team writes it, served by heterodl's workers and read by
PyTorch's DataLoader side by side.

    photos  ImageFolder-like: the files of $HETERODL_BENCH_FILES (a heterodl
            file list, path<TAB>label), PIL decode + RandomResizedCrop(224) +
            RandomHorizontalFlip, uint8 [3, 224, 224] and the label
    ready   no work at all: the same uint8 [3, 224, 224] array every time
            (the path's own cost per sample)
"""

import os

import numpy


class Photos:
    def __init__(self, list_path):
        self.paths, self.labels = [], []
        with open(list_path) as f:
            for line in f:
                path, _, label = line.rstrip("\n").partition("\t")
                if path:
                    self.paths.append(path)
                    self.labels.append(int(label or 0))
        self.transform = None

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        from PIL import Image
        from torchvision import transforms
        if self.transform is None:
            self.transform = transforms.Compose([
                transforms.RandomResizedCrop(224, antialias=True),
                transforms.RandomHorizontalFlip(), transforms.PILToTensor()])
        with Image.open(self.paths[index]) as image:
            return self.transform(image.convert("RGB")), self.labels[index]


class Ready:
    def __init__(self, size=4096):
        self.size = size
        self.image = numpy.full((3, 224, 224), 7, numpy.uint8)

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        return self.image, index


def photos():
    return Photos(os.environ["HETERODL_BENCH_FILES"])


def ready():
    return Ready()
