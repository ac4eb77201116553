"""A normal epoch beside a costly client, on one `heterodl serve` per binary.

The server's threads are shared between clients by what their samples cost
(src/server/sample_pool.h), so a client whose pipeline is a hundred times
dearer than yours gets a hundredth of the samples, not half of the threads.
This measures what that is worth: a loader reads one epoch of the dataset
with the standard pipeline, alone and then while another loader streams
batches of a pipeline near the server's cost limit (a 171-pixel blur of a
2048-pixel resize), against each binary given, side by side in one run.

  .venv/bin/python bench/costly_neighbour.py --dataset data/sample-2k \\
      build/heterodl /tmp/heterodl-before

Prints one line per binary: the epoch's seconds alone and beside the costly
client, and their ratio. Needs the Python module (PYTHONPATH=build/python).
"""

import argparse
import os
import sys
import tempfile
import threading
import time

import heterodl

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "testing"))
from processes import start_server  # noqa: E402

COSTLY = "resize(2048)|gaussian_blur(171)|center_crop(32)"
STANDARD = "random_resized_crop(224)|hflip(0.5)"


def epoch_seconds(address, batch_size):
    start = time.monotonic()
    loader = heterodl.RemoteDataLoader(servers=address, batch_size=batch_size, pipeline=STANDARD,
                                       seed=5, stall_timeout=600.0)
    images = sum(len(batch.labels) for batch in loader)
    return time.monotonic() - start, images


def measure(binary, dataset, threads, batch_size):
    with tempfile.TemporaryDirectory(prefix="heterodl-neighbour-") as folder:
        server, address = start_server(binary, dataset, os.path.join(folder, "port"),
                                       "--threads", str(threads))
        try:
            epoch_seconds(address, batch_size)  # warm: the page cache, the first connection
            alone, images = epoch_seconds(address, batch_size)
            stop = threading.Event()

            def costly_client():
                loader = heterodl.RemoteDataLoader(servers=address, batch_size=16, pipeline=COSTLY,
                                                   seed=1, stall_timeout=600.0)
                while not stop.is_set():
                    for _ in loader:
                        if stop.is_set():
                            break

            neighbour = threading.Thread(target=costly_client)
            neighbour.start()
            time.sleep(2)  # its first batches are being built
            beside, _ = epoch_seconds(address, batch_size)
            stop.set()
            neighbour.join()
            return images, alone, beside
        finally:
            server.terminate()
            server.wait(timeout=60)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binaries", nargs="+", help="heterodl binaries to compare")
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    for binary in args.binaries:
        images, alone, beside = measure(binary, args.dataset, args.threads, args.batch_size)
        print(f"{binary}: epoch of {images} images {alone:.2f} s alone, {beside:.2f} s beside a "
              f"costly client ({beside / alone:.1f}x)")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
