"""The PyTorch DataLoader peer of `heterodl bench feed`: N worker processes
decode and augment (RandomResizedCrop(224) + RandomHorizontalFlip, uint8
out, as heterodl delivers), the main process consumes the batches.

    python feed_dataloader.py --files LIST --decoder pil|tensor --workers N
                              --batch-size B --seconds S [--out F]

--decoder pil: PIL + torchvision.transforms, what most scripts run.
--decoder tensor: torchvision.io.decode_image (libjpeg-turbo, libpng,
libwebp, giflib) + transforms.v2 on uint8 tensors, the faster one a PyTorch
expert writes.

Files of a format the decoder lacks are left out before the run; a file its
decoder refuses (a damaged one) is dropped from its batch, as a robust
training script's collate does; both are counted in the report.
"""

import torch
import torchvision
from torch.utils.data import DataLoader, Dataset, default_collate

import feed_common

# What each decoder reads (by the files' first bytes).
READABLE = {"pil": {"JPEG", "PNG", "WebP", "GIF", "BMP"},
            "tensor": {"JPEG", "PNG", "WebP", "GIF"}}


class Images(Dataset):
    def __init__(self, paths, labels, decoder):
        self.paths, self.labels, self.decoder = paths, labels, decoder
        self.transform = None

    def _build(self):
        # Built in the worker: transforms hold no state worth pickling.
        if self.decoder == "pil":
            from torchvision import transforms
            self.transform = transforms.Compose([
                transforms.RandomResizedCrop(224, antialias=True),
                transforms.RandomHorizontalFlip(),
                transforms.PILToTensor()])
        else:
            from torchvision.transforms import v2
            self.transform = v2.Compose([
                v2.RandomResizedCrop(224, antialias=True),
                v2.RandomHorizontalFlip()])

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        if self.transform is None:
            self._build()
        try:
            if self.decoder == "pil":
                from PIL import Image
                with Image.open(self.paths[index]) as image:
                    pixels = self.transform(image.convert("RGB"))
            else:
                data = torchvision.io.read_file(self.paths[index])
                pixels = self.transform(
                    torchvision.io.decode_image(data, mode=torchvision.io.ImageReadMode.RGB))
        except (OSError, RuntimeError, ValueError):
            return None  # refused by the decoder: dropped by collate
        return pixels, self.labels[index]


def collate_decoded(samples):
    return default_collate([sample for sample in samples if sample is not None])


def main():
    args = feed_common.arguments(
        __doc__, lambda parser: parser.add_argument("--decoder", choices=["pil", "tensor"],
                                                    default="pil"))
    torch.set_num_threads(1)
    paths, labels = feed_common.read_file_list(args.files)
    paths, labels, left_out, note = feed_common.keep_formats(
        paths, labels, READABLE[args.decoder],
        "PIL" if args.decoder == "pil" else "torchvision.io.decode_image")
    loader = DataLoader(Images(paths, labels, args.decoder), batch_size=args.batch_size,
                        shuffle=True, num_workers=args.workers, persistent_workers=True,
                        drop_last=False, collate_fn=collate_decoded)
    result = feed_common.consume(lambda epoch: loader, args.seconds,
                                 lambda batch: int(batch[0].shape[0]), files_per_epoch=len(paths))
    feed_common.report(result, args.out, left_out, note,
                       ran=feed_common.versions("torch", "torchvision", "PIL"))


if __name__ == "__main__":
    main()
