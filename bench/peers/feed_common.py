"""What the feed peers share: the consumer's loop and its report.

Each peer drives its loader the way `heterodl bench feed` drives heterodl's:
epochs one after another (at least three, and at least --seconds), the clock
started at the first batch (start-up is not the feed), and writes one JSON
object: {"images": N, "seconds": S, "images_per_sec": R, "skipped_files": K,
"skipped": WHY, "versions": {LIBRARY: VERSION}}. A peer whose decoder cannot read some files (a format it
lacks, a damaged file it refuses) leaves them out and says how many, rather
than ending the benchmark: its rate is over the files it kept.
"""

import collections

import argparse
import json
import time


def arguments(description, extra=None):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--files", help="image paths, one per line (path<TAB>label)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--out", default="")
    if extra:
        extra(parser)
    return parser.parse_args()


def read_file_list(path):
    """(paths, labels) of a heterodl file list."""
    paths, labels = [], []
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            file, _, label = line.partition("\t")
            paths.append(file)
            labels.append(int(label or 0))
    return paths, labels


# The first bytes of each format heterodl's datasets hold.
_SIGNATURES = ((b"\xff\xd8\xff", "JPEG"), (b"\x89PNG\r\n\x1a\n", "PNG"), (b"GIF8", "GIF"),
               (b"BM", "BMP"))


def image_format(path):
    """"JPEG", "PNG", "WebP", "GIF", "BMP" or "other", from the file's first
    bytes (not its name)."""
    with open(path, "rb") as f:
        head = f.read(12)
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WebP"
    for signature, name in _SIGNATURES:
        if head.startswith(signature):
            return name
    return "other"


def keep_formats(paths, labels, readable, decoder_name):
    """(paths, labels, left out, note): the files whose format is in
    `readable` with their labels, how many were left out, and what they were
    ("3 WebP, 1 other (DECODER cannot decode them)"; "" when none)."""
    kept_paths, kept_labels = [], []
    left_out = collections.Counter()
    for path, label in zip(paths, labels):
        kind = image_format(path)
        if kind in readable:
            kept_paths.append(path)
            kept_labels.append(label)
        else:
            left_out[kind] += 1
    if not left_out:
        return kept_paths, kept_labels, 0, ""
    kinds = ", ".join(f"{count} {kind}" for kind, count in sorted(left_out.items()))
    return (kept_paths, kept_labels, sum(left_out.values()),
            f"{kinds} ({decoder_name} cannot decode them)")


def consume(epochs, seconds, touch=lambda batch: batch, files_per_epoch=None):
    """Runs `epochs(e)` (an iterable of batches of epoch e) until at least
    three epochs and `seconds` have passed; `touch` is what the consumer does
    with a batch (returns its image count). Returns the report; with
    `files_per_epoch`, its "refused" is how many of them the first epoch did
    not deliver (files the peer's decoder refused and dropped)."""
    images = 0
    first = None
    epoch = 0
    delivered_in_first_epoch = 0
    while True:
        for batch in epochs(epoch):
            count = touch(batch)
            if epoch == 0:
                delivered_in_first_epoch += count
            if first is None:
                first = time.perf_counter()
            else:
                images += count
        epoch += 1
        if epoch >= 3 and first is not None and time.perf_counter() - first >= seconds:
            break
    elapsed = time.perf_counter() - first
    refused = files_per_epoch - delivered_in_first_epoch if files_per_epoch is not None else 0
    return {"images": images, "seconds": elapsed, "images_per_sec": images / elapsed,
            "epochs": epoch, "refused": refused}


def versions(*modules):
    """What a peer ran: Python and the named modules' versions (PIL's as
    Pillow, or Pillow-SIMD with its .postN), for the report beside its
    figure."""
    import importlib
    import sys

    found = {"python": sys.version.split()[0]}
    for name in modules:
        version = getattr(importlib.import_module(name), "__version__", "unknown")
        if name == "PIL":
            name = "Pillow-SIMD" if ".post" in version else "Pillow"
        found[name] = version
    return found


def report(result, out, left_out=0, note="", ran=None):
    """Prints and writes the result: `left_out` files (described by `note`)
    were left out before the run, and the files the run's decoder refused
    are added to them; `ran` is versions()'s dict."""
    notes = [note] if note else []
    skipped_files = left_out
    if result.get("refused"):
        notes.append(f"{result['refused']} refused by its decoder")
        skipped_files += result["refused"]
    result = dict(result, skipped_files=skipped_files, skipped="; ".join(notes),
                  versions=ran or {})
    text = json.dumps({k: result[k] for k in ("images", "seconds", "images_per_sec",
                                              "skipped_files", "skipped", "versions")})
    print(text, flush=True)
    if out:
        with open(out, "w") as f:
            f.write(text)
