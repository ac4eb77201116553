"""The peers of `heterodl bench augment`, as a PyTorch DataLoader worker runs
them, on one core:

  --decoder pil     PIL's Image.open(...).convert("RGB") + torchvision.transforms
                    (what most training scripts do);
  --decoder tensor  torchvision.io.decode_image (libjpeg-turbo, libpng, libwebp)
                    + torchvision.transforms.v2 on uint8 tensors (the faster peer).

    python torchvision_augment.py --files LIST --pipeline SPEC --seconds S
                                  [--decoder pil|tensor] [--out F]

LIST holds one image path per line, or "GROUP<TAB>PATH" lines: then every
group is timed on its own for S seconds, and all files together as the total.
The files are read into memory first, so only decode + transforms are timed,
as on the heterodl side. A file the peer's decoder cannot read (a format it
lacks, a damaged file it refuses) is left out after one try and counted, so
one file never ends the benchmark. Writes to --out (or else prints) one JSON
object: {"images": N, "seconds": S, "images_per_sec": R, "groups": {GROUP:
{...}}, "skipped_files": K, "skipped": WHY}.
"""

import argparse
import io
import json
import os
import re
import time

import torch
from PIL import Image
from torchvision import transforms as transforms_v1
from torchvision.io import ImageReadMode, decode_image
from torchvision.transforms import v2 as transforms_v2


def parse_range(text):
    low, high = text.split(":")
    return (float(low), float(high))


def build(spec, transforms):
    """The heterodl pipeline spec as torchvision `transforms` (v1 or v2)."""
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
    return ops


def make_runner(spec, decoder):
    """One image, encoded bytes to a uint8 CHW tensor, as the peer does it."""
    if decoder == "pil":
        pipeline = transforms_v1.Compose(build(spec, transforms_v1)
                                         + [transforms_v1.PILToTensor()])
        return lambda blob: pipeline(Image.open(io.BytesIO(blob)).convert("RGB"))
    pipeline = transforms_v2.Compose(build(spec, transforms_v2))
    return lambda blob: pipeline(decode_image(torch.frombuffer(blob, dtype=torch.uint8),
                                              mode=ImageReadMode.RGB))


def measure(run, blobs, seconds):
    for blob in blobs[:8]:  # warm-up: first calls pay for allocations
        run(blob)
    images = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for blob in blobs:
            run(blob)
            images += 1
            if images % 8 == 0 and time.perf_counter() >= deadline:
                break
    elapsed = time.perf_counter() - start
    return {"images": images, "seconds": elapsed, "images_per_sec": images / elapsed}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", required=True)
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--decoder", choices=["pil", "tensor"], default="pil")
    parser.add_argument("--core", type=int, default=-1)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    if args.core >= 0:
        os.sched_setaffinity(0, {args.core})
    torch.set_num_threads(1)
    groups = {}
    everything = []
    with open(args.files) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            group, _, path = line.rpartition("\t")
            with open(path, "rb") as image:
                blob = bytearray(image.read())  # writable: torch.frombuffer views it
            everything.append(blob)
            if group:
                groups.setdefault(group, []).append(blob)
    run = make_runner(args.pipeline, args.decoder)
    refused = {}  # id(blob) -> the decoder's complaint
    for blob in everything:
        try:
            run(blob)
        except Exception as error:  # any decoder's refusal: PIL, torchvision, libpng...
            refused[id(blob)] = f"{type(error).__name__}: {error}"
    if refused:
        everything = [blob for blob in everything if id(blob) not in refused]
        groups = {name: [blob for blob in blobs if id(blob) not in refused]
                  for name, blobs in groups.items()}
        groups = {name: blobs for name, blobs in groups.items() if blobs}
    if not everything:
        raise SystemExit(f"the {args.decoder} peer decodes none of the files: "
                         f"{next(iter(refused.values()))}")
    result = measure(run, everything, args.seconds)
    if groups:
        result["groups"] = {name: measure(run, blobs, args.seconds)
                            for name, blobs in groups.items()}
    if refused:
        first = next(iter(refused.values()))
        result["skipped_files"] = len(refused)
        result["skipped"] = f"{len(refused)} its decoder refused (first: {first[:120]})"
    text = json.dumps(result)
    if not args.out:
        print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
