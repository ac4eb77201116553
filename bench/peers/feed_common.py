"""What the feed peers share: the consumer's loop and its report.

Each peer drives its loader the way `heterodl bench feed` drives heterodl's:
epochs one after another (at least three, and at least --seconds), the clock
started at the first batch (start-up is not the feed), and writes one JSON
object: {"images": N, "seconds": S, "images_per_sec": R}.
"""

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


def consume(epochs, seconds, touch=lambda batch: batch):
    """Runs `epochs(e)` (an iterable of batches of epoch e) until at least
    three epochs and `seconds` have passed; `touch` is what the consumer does
    with a batch (returns its image count). Returns the report."""
    images = 0
    first = None
    epoch = 0
    while True:
        for batch in epochs(epoch):
            count = touch(batch)
            if first is None:
                first = time.perf_counter()
            else:
                images += count
        epoch += 1
        if epoch >= 3 and first is not None and time.perf_counter() - first >= seconds:
            break
    elapsed = time.perf_counter() - first
    return {"images": images, "seconds": elapsed, "images_per_sec": images / elapsed,
            "epochs": epoch}


def report(result, out):
    text = json.dumps({k: result[k] for k in ("images", "seconds", "images_per_sec")})
    print(text, flush=True)
    if out:
        with open(out, "w") as f:
            f.write(text)
