"""The peers of `heterodl bench augment`, as a PyTorch DataLoader worker runs
them, on one core:

  --decoder pil     PIL's Image.open(...).convert("RGB") + torchvision.transforms
                    (what most training scripts do);
  --decoder tensor  torchvision.io.decode_image (libjpeg-turbo, libpng, libwebp)
                    + torchvision.transforms.v2 on uint8 tensors (the faster peer).

    python torchvision_augment.py --files LIST --pipeline SPEC --seconds S
                                  [--decoder pil|tensor] [--masks | --boxes] [--out F]

With --masks each sample is an image and its segmentation mask (a PNG of
class ids), and both decoders feed torchvision.transforms.v2 the pair, the
mask as a tv_tensors.Mask, as torchvision's segmentation references do: PIL
opens both (the image converted to RGB), or decode_image reads both. With
--boxes each image comes with its boxes ("x1 y1 x2 y2,..." after a tab),
moved as tv_tensors.BoundingBoxes and sanitized at the end
(v2.SanitizeBoundingBoxes), as torchvision's detection references do.

LIST holds one image path per line, or "GROUP<TAB>PATH" lines: then every
group is timed on its own for S seconds, and all files together as the total
(with --masks, "[GROUP<TAB>]IMAGE<TAB>MASK").
The files are read into memory first, so only decode + transforms are timed,
as on the heterodl side. A file the peer's decoder cannot read (a format it
lacks, a damaged file it refuses) is left out after one try and counted, so
one file never ends the benchmark. Writes to --out (or else prints) one JSON
object: {"images": N, "seconds": S, "images_per_sec": R, "groups": {GROUP:
{...}}, "skipped_files": K, "skipped": WHY, "versions": {LIBRARY: VERSION}}.
"""

import argparse
import io
import json
import os
import random
import re
import time

import torch
from PIL import Image, ImageFilter
from torchvision import transforms as transforms_v1
from torchvision import tv_tensors
from torchvision.io import ImageReadMode, decode_image
from torchvision.transforms import v2 as transforms_v2


def parse_range(text):
    low, high = text.split(":")
    return (float(low), float(high))


def parse_size(text):
    """heterodl's size, N or HxW, as torchvision's: N or (H, W)."""
    if "x" in text:
        height, width = text.split("x")
        return (int(height), int(width))
    return int(text)


class PilGaussianBlur:
    """DINO's utils.GaussianBlur: PIL's own blur of a radius (sigma) uniform
    in `sigma`, with probability p. DINO's repository blurs this way rather
    than with torchvision's GaussianBlur, whose 23 x 23 convolution of a PIL
    image (made a float tensor) is many times slower."""

    def __init__(self, sigma, p):
        self.sigma = sigma if isinstance(sigma, tuple) else (sigma, sigma)
        self.p = p

    def __call__(self, image):
        if random.random() > self.p:
            return image
        return image.filter(ImageFilter.GaussianBlur(radius=random.uniform(*self.sigma)))


def build(spec, transforms, pil_blur=False):
    """The heterodl pipeline spec as torchvision `transforms` (v1 or v2);
    with `pil_blur`, gaussian_blur as DINO's repository writes it for PIL."""
    ops = []
    for op in spec.split("|"):
        match = re.fullmatch(r"\s*(\w+)\s*\((.*)\)\s*", op)
        if not match:
            raise SystemExit(f"cannot translate '{op}'")
        name, args = match.group(1), [a.strip() for a in match.group(2).split(",") if a.strip()]
        positional = [a for a in args if "=" not in a]
        named = dict(a.split("=", 1) for a in args if "=" in a)

        def arg(index, key, default=None, positional=positional, named=named):
            """A parameter given by position or by name, as heterodl binds them."""
            return positional[index] if index < len(positional) else named.get(key, default)

        def symmetric(text):
            """heterodl's `d` (meaning -d:d) or `lo:hi`, as torchvision takes degrees."""
            return parse_range(text) if ":" in text else float(text)
        if name == "decode":
            continue  # PIL always decodes one way (libjpeg's exact defaults)
        if name == "random_resized_crop":
            ops.append(transforms.RandomResizedCrop(
                parse_size(positional[0]),
                scale=parse_range(named.get("scale", "0.08:1")),
                ratio=parse_range(named.get("ratio", "0.75:1.3333333")),
                antialias=True))
        elif name == "resize":
            ops.append(transforms.Resize(parse_size(positional[0]), antialias=True))
        elif name == "center_crop":
            ops.append(transforms.CenterCrop(parse_size(positional[0])))
        elif name == "scale_jitter":  # v2 only; its target_size is (width, height)
            height, width = parse_size(positional[0]) if "x" in positional[0] \
                else (int(positional[0]),) * 2
            ops.append(transforms.ScaleJitter((width, height),
                                              scale_range=parse_range(named["scale_range"]),
                                              antialias=True))
        elif name == "random_resize":  # v2 only
            ops.append(transforms.RandomResize(int(positional[0]), int(positional[1]),
                                               antialias=True))
        elif name == "random_crop":
            fill = int(named.get("fill", 0))
            if transforms is transforms_v2:  # masks padded with the ignore index
                fill = {tv_tensors.Mask: 255, "others": fill}
            ops.append(transforms.RandomCrop(
                parse_size(positional[0]), padding=int(named["padding"]) if "padding" in named
                else None, pad_if_needed=named.get("pad_if_needed", "false") == "true",
                fill=fill))
        elif name == "color_jitter":
            keys = ["brightness", "contrast", "saturation", "hue"]
            jitter = transforms.ColorJitter(*[float(arg(i, k, 0)) for i, k in enumerate(keys)])
            p = float(arg(4, "p", 1))
            ops.append(jitter if p >= 1 else transforms.RandomApply([jitter], p=p))
        elif name == "grayscale":
            ops.append(transforms.RandomGrayscale(float(positional[0] if positional
                                                        else named.get("p", 0.1))))
        elif name == "gaussian_blur":
            sigma = arg(1, "sigma", "0.1:2")
            if pil_blur:
                ops.append(PilGaussianBlur(parse_range(sigma) if ":" in sigma else float(sigma),
                                           float(arg(2, "p", 1))))
                continue
            blur = transforms.GaussianBlur(int(positional[0]),
                                           parse_range(sigma) if ":" in sigma else float(sigma))
            p = float(arg(2, "p", 1))
            ops.append(blur if p >= 1 else transforms.RandomApply([blur], p=p))
        elif name == "rotation":
            degrees = positional[0] if positional else named["degrees"]
            ops.append(transforms.RandomRotation(parse_range(degrees) if ":" in degrees
                                                 else float(degrees)))
        elif name == "affine":
            translate = arg(1, "translate")
            scale, shear = arg(2, "scale"), arg(3, "shear")
            ops.append(transforms.RandomAffine(
                symmetric(arg(0, "degrees")),
                translate=(parse_range(translate) if ":" in translate
                           else (float(translate),) * 2) if translate else None,
                scale=parse_range(scale) if scale else None,
                shear=symmetric(shear) if shear else None, fill=int(arg(4, "fill", 0))))
        elif name == "solarize":
            ops.append(transforms.RandomSolarize(float(arg(0, "threshold")),
                                                 p=float(arg(1, "p", 0.5))))
        elif name == "posterize":
            ops.append(transforms.RandomPosterize(int(arg(0, "bits")), p=float(arg(1, "p", 0.5))))
        elif name == "equalize":
            ops.append(transforms.RandomEqualize(p=float(arg(0, "p", 0.5))))
        elif name == "autocontrast":
            ops.append(transforms.RandomAutocontrast(p=float(arg(0, "p", 0.5))))
        elif name == "adjust_sharpness":
            ops.append(transforms.RandomAdjustSharpness(float(arg(0, "sharpness_factor")),
                                                        p=float(arg(1, "p", 0.5))))
        elif name == "random_erasing":
            value = arg(3, "value", "0")
            ops.append(transforms.RandomErasing(
                p=float(arg(0, "p", 0.5)), scale=parse_range(arg(1, "scale", "0.02:0.33")),
                ratio=parse_range(arg(2, "ratio", "0.3:3.3")),
                value=value if value == "random" else int(value)))
        elif name == "rand_augment":
            ops.append(transforms.RandAugment(
                num_ops=int(arg(0, "num_ops", 2)), magnitude=int(arg(1, "magnitude", 9)),
                num_magnitude_bins=int(arg(2, "num_magnitude_bins", 31)),
                fill=int(arg(3, "fill", 0))))
        elif name == "trivial_augment_wide":
            ops.append(transforms.TrivialAugmentWide(
                num_magnitude_bins=int(arg(0, "num_magnitude_bins", 31)),
                fill=int(arg(1, "fill", 0))))
        elif name == "hflip":
            ops.append(transforms.RandomHorizontalFlip(float(positional[0] if positional
                                                             else named.get("p", 0.5))))
        else:
            raise SystemExit(f"the peer has no translation for '{name}'")
    return ops


def view_groups(spec):
    """heterodl's "2*A;8*B" as [(2, "A"), (8, "B")]."""
    groups = []
    for part in spec.split(";"):
        count, _, group_spec = part.partition("*") if "*" in part.split("(")[0] else ("1", "", part)
        groups.append((int(count), group_spec))
    return groups


def make_single_runner(spec, decoder):
    """One image's encoded bytes to a uint8 CHW tensor, as the peer does it."""
    if decoder == "pil":
        ops = build(spec, transforms_v1)
        # v1's RandomErasing takes tensors: the image becomes one before the
        # first erasing, as DeiT's recipe erases after ToTensor.
        erasing = [i for i, op in enumerate(ops) if isinstance(op, transforms_v1.RandomErasing)]
        ops.insert(erasing[0] if erasing else len(ops), transforms_v1.PILToTensor())
        pipeline = transforms_v1.Compose(ops)
        return lambda blob: pipeline(Image.open(io.BytesIO(blob)).convert("RGB"))
    pipeline = transforms_v2.Compose(build(spec, transforms_v2))
    return lambda blob: pipeline(decode_image(torch.frombuffer(blob, dtype=torch.uint8),
                                              mode=ImageReadMode.RGB))


def make_views_runner(spec, decoder):
    """Every view of one image, as DINO's DataAugmentationDINO makes them:
    the image decoded once (PIL, or decode_image), each view its group's
    transforms applied to it; the PIL peer blurs with PIL's own filter, as
    DINO's repository does, the tensor peer with transforms.v2."""
    groups = view_groups(spec)
    if decoder == "pil":
        pipelines = [(count, transforms_v1.Compose(build(group_spec, transforms_v1, pil_blur=True)
                                                   + [transforms_v1.PILToTensor()]))
                     for count, group_spec in groups]

        def decode(blob):
            return Image.open(io.BytesIO(blob)).convert("RGB")
    else:
        pipelines = [(count, transforms_v2.Compose(build(group_spec, transforms_v2)))
                     for count, group_spec in groups]

        def decode(blob):
            return decode_image(torch.frombuffer(blob, dtype=torch.uint8), mode=ImageReadMode.RGB)

    def run(blob):
        image = decode(blob)
        return [pipeline(image) for count, pipeline in pipelines for _ in range(count)]
    return run


def make_runner(spec, decoder, masks=False, boxes=False):
    """One image (with `masks`, an (image, mask) pair), encoded bytes to a
    uint8 CHW tensor (and its mask), as the peer does it; a spec of several
    views ("2*A;8*B") makes a list of them."""
    if ";" in spec or "*" in spec.split("(")[0]:
        return make_views_runner(spec, decoder)
    if boxes:
        pipeline = transforms_v2.Compose(build(spec, transforms_v2)
                                         + [transforms_v2.SanitizeBoundingBoxes(
                                             labels_getter=None)])
        to_tensor = transforms_v2.PILToTensor()

        def run_boxes(sample):
            blob, corners = sample
            if decoder == "pil":
                image = Image.open(io.BytesIO(blob)).convert("RGB")
                size = (image.height, image.width)
            else:
                image = decode_image(torch.frombuffer(blob, dtype=torch.uint8),
                                     mode=ImageReadMode.RGB)
                size = tuple(image.shape[1:])
            out, moved = pipeline(image, tv_tensors.BoundingBoxes(
                corners, format="XYXY", canvas_size=size))
            return (to_tensor(out) if decoder == "pil" else out), moved
        return run_boxes
    if masks:
        pipeline = transforms_v2.Compose(build(spec, transforms_v2))
        if decoder == "pil":
            to_tensor = transforms_v2.PILToTensor()

            def run_pil(blobs):
                image = Image.open(io.BytesIO(blobs[0])).convert("RGB")
                mask = tv_tensors.Mask(transforms_v2.functional.pil_to_tensor(
                    Image.open(io.BytesIO(blobs[1]))))
                image, mask = pipeline(image, mask)
                return to_tensor(image), mask
            return run_pil

        def run_tensor(blobs):
            image = decode_image(torch.frombuffer(blobs[0], dtype=torch.uint8),
                                 mode=ImageReadMode.RGB)
            mask = tv_tensors.Mask(decode_image(torch.frombuffer(blobs[1], dtype=torch.uint8),
                                                mode=ImageReadMode.UNCHANGED))
            return pipeline(image, mask)
        return run_tensor
    return make_single_runner(spec, decoder)


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


def versions(decoder):
    """What this peer ran, as a user who installs it today gets it: the
    decoder's library and the codecs it carries, torchvision and torch."""
    import sys

    import PIL
    import torchvision
    from PIL import features

    found = {"python": sys.version.split()[0], "torch": torch.__version__,
             "torchvision": torchvision.__version__}
    if decoder == "pil":
        # Pillow-SIMD numbers its releases after Pillow's, with a .postN.
        found["Pillow-SIMD" if ".post" in PIL.__version__ else "Pillow"] = PIL.__version__
        for codec, name in (("libjpeg_turbo", "libjpeg-turbo"), ("zlib", "zlib"),
                            ("webp", "libwebp")):
            version = features.version(codec)
            if version:
                found[name] = version
    else:
        # torchvision.io decodes with the libjpeg-turbo, libpng and libwebp
        # its wheel bundles; it does not say which versions.
        found["codecs"] = "bundled with torchvision (versions not exposed)"
    return found


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", required=True)
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--decoder", choices=["pil", "tensor"], default="pil")
    parser.add_argument("--masks", action="store_true",
                        help="lines name an image and its mask; both go through the transforms")
    parser.add_argument("--boxes", action="store_true",
                        help="lines name an image and its boxes; both go through the transforms")
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
            corners = None
            if args.boxes:
                group, _, text = line.rpartition("\t")
                group, _, path = group.rpartition("\t")
                paths = [path]
                corners = torch.tensor([[float(v) for v in box.split()]
                                        for box in text.split(",") if box],
                                       dtype=torch.float32).reshape(-1, 4)
            elif args.masks:
                group, _, paths = line.rpartition("\t")
                group, _, image_path = group.rpartition("\t")
                paths = [image_path, paths]
            else:
                group, _, path = line.rpartition("\t")
                paths = [path]
            blobs = []
            for path in paths:
                with open(path, "rb") as image:
                    blobs.append(bytearray(image.read()))  # writable: torch.frombuffer views it
            blob = tuple(blobs) if args.masks else (blobs[0], corners) if args.boxes \
                else blobs[0]
            everything.append(blob)
            if group:
                groups.setdefault(group, []).append(blob)
    run = make_runner(args.pipeline, args.decoder, args.masks, args.boxes)
    boxes_read = sum(len(sample[1]) for sample in everything) if args.boxes else 0
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
    result["versions"] = versions(args.decoder)
    if args.boxes:
        result["boxes"] = boxes_read
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
