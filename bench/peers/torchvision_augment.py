"""The peer of `heterodl bench augment`: torchvision transforms over PIL, as a
PyTorch DataLoader worker runs them, on one core.

    python torchvision_augment.py --files LIST --pipeline SPEC --seconds S [--out F]

LIST holds one image path per line. The files are read into memory first, so
only decode + transforms are timed, as on the heterodl side. Prints (and with
--out writes) one JSON object: {"images": N, "seconds": S, "images_per_sec": R}.
"""

import argparse
import io
import json
import os
import re
import time

import torch
from PIL import Image
from torchvision import transforms


def parse_range(text):
    low, high = text.split(":")
    return (float(low), float(high))


def build(spec):
    """The heterodl pipeline spec as torchvision transforms."""
    ops = []
    for op in spec.split("|"):
        match = re.fullmatch(r"\s*(\w+)\s*\((.*)\)\s*", op)
        if not match:
            raise SystemExit(f"cannot translate '{op}'")
        name, args = match.group(1), [a.strip() for a in match.group(2).split(",") if a.strip()]
        positional = [a for a in args if "=" not in a]
        named = dict(a.split("=", 1) for a in args if "=" in a)
        if name == "decode":
            continue  # PIL always decodes one way (libjpeg's exact defaults)
        if name == "random_resized_crop":
            ops.append(transforms.RandomResizedCrop(
                int(positional[0]),
                scale=parse_range(named.get("scale", "0.08:1")),
                ratio=parse_range(named.get("ratio", "0.75:1.3333333")),
                antialias=True))
        elif name == "resize":
            ops.append(transforms.Resize(int(positional[0]), antialias=True))
        elif name == "center_crop":
            ops.append(transforms.CenterCrop(int(positional[0])))
        elif name == "color_jitter":
            values = [float(v) for v in positional] + [0.0] * (4 - len(positional))
            keys = ["brightness", "contrast", "saturation", "hue"]
            values = [float(named.get(k, v)) for k, v in zip(keys, values)]
            ops.append(transforms.ColorJitter(*values))
        elif name == "grayscale":
            ops.append(transforms.RandomGrayscale(float(positional[0] if positional
                                                        else named.get("p", 0.1))))
        elif name == "gaussian_blur":
            sigma = named.get("sigma", "0.1:2")
            ops.append(transforms.GaussianBlur(int(positional[0]),
                                               parse_range(sigma) if ":" in sigma
                                               else float(sigma)))
        elif name == "rotation":
            degrees = positional[0] if positional else named["degrees"]
            ops.append(transforms.RandomRotation(parse_range(degrees) if ":" in degrees
                                                 else float(degrees)))
        elif name == "hflip":
            ops.append(transforms.RandomHorizontalFlip(float(positional[0] if positional
                                                             else named.get("p", 0.5))))
        else:
            raise SystemExit(f"the peer has no translation for '{name}'")
    ops.append(transforms.PILToTensor())
    return transforms.Compose(ops)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", required=True)
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--core", type=int, default=-1)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    if args.core >= 0:
        os.sched_setaffinity(0, {args.core})
    torch.set_num_threads(1)
    with open(args.files) as f:
        blobs = [open(path.strip(), "rb").read() for path in f if path.strip()]
    pipeline = build(args.pipeline)
    # Warm-up: first calls pay for imports and allocations.
    for blob in blobs[:8]:
        pipeline(Image.open(io.BytesIO(blob)).convert("RGB"))
    images = 0
    start = time.perf_counter()
    deadline = start + args.seconds
    while time.perf_counter() < deadline:
        for blob in blobs:
            pipeline(Image.open(io.BytesIO(blob)).convert("RGB"))
            images += 1
            if images % 32 == 0 and time.perf_counter() >= deadline:
                break
    seconds = time.perf_counter() - start
    result = json.dumps({"images": images, "seconds": seconds, "images_per_sec": images / seconds})
    print(result)
    if args.out:
        with open(args.out, "w") as f:
            f.write(result)


if __name__ == "__main__":
    main()
