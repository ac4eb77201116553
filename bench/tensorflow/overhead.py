"""What heterodl.tf.dataset costs per batch against the same TensorFlow loop
reading the loader's NumPy batches (what a hand-written generator gives),
at batch 256 x 224 x 224 on the CPU.

Both loops run a compiled step that reads every pixel (a cast to float and
a mean: what any model's first layer does with its input) over batches the
loader already holds, so that the figure is the consumer's cost per batch,
not the servers' speed. The loops alternate, epoch by epoch.

    .venv-frameworks/tensorflow/bin/pip install dist/heterodl-*.whl
    .venv-frameworks/tensorflow/bin/python bench/tensorflow/overhead.py --build build

Prints each loop's milliseconds per batch (median of the rounds) and the
ratio (target: <= 1.05).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy
import tensorflow as tf

import heterodl
import heterodl.tf

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--build", default="build", help="the build folder (its heterodl binary)")
parser.add_argument("--batch-size", type=int, default=256)
parser.add_argument("--batches", type=int, default=8, help="per epoch")
parser.add_argument("--rounds", type=int, default=5)
args = parser.parse_args()

work = tempfile.mkdtemp(prefix="heterodl-tf-overhead-")
binary = os.path.join(args.build, "heterodl")
images = args.batch_size * args.batches
subprocess.run([binary, "dataset", "sample", os.path.join(work, "data"), "--images",
                str(images)], check=True, capture_output=True)
port_file = os.path.join(work, "port")
server = subprocess.Popen([binary, "serve", "--dataset", os.path.join(work, "data"),
                           "--address", "127.0.0.1:0", "--port-file", port_file],
                          stderr=subprocess.DEVNULL)
while not os.path.exists(port_file):
    time.sleep(0.1)
with open(port_file) as f:
    servers = f"127.0.0.1:{int(f.read())}"


@tf.function
def step(images, labels):
    return tf.reduce_mean(tf.cast(images, tf.float32)) + tf.cast(tf.reduce_sum(labels),
                                                                  tf.float32)


def loader(format):
    return heterodl.RemoteDataLoader(servers, batch_size=args.batch_size, format=format,
                                     pipeline="random_resized_crop(224)|hflip(0.5)",
                                     max_buffered_mb=2 * args.batches * args.batch_size * 0.16)


def held(feed, epoch):
    """Sets `epoch` and waits until the loader holds all of its batches."""
    feed.set_epoch(epoch)
    while feed.stats()["held_ahead"] < args.batches:
        time.sleep(0.05)


numpy_loader, tf_loader = loader("numpy"), loader("dlpack")
dataset = heterodl.tf.dataset(tf_loader)
results = {"numpy": [], "heterodl.tf": []}
for round_ in range(args.rounds + 1):  # round 0 warms up (tracing, first connections)
    held(numpy_loader, round_)
    start = time.perf_counter()
    for images, labels in numpy_loader:
        step(tf.convert_to_tensor(images), tf.convert_to_tensor(labels)).numpy()
    numpy_ms = (time.perf_counter() - start) * 1000 / args.batches
    held(tf_loader, round_)
    dataset._heterodl_feed.started = None  # the iteration starts where the loader stands
    start = time.perf_counter()
    count = 0
    for images, labels in dataset:
        step(images, labels).numpy()
        count += 1
    assert count == args.batches, count
    tf_ms = (time.perf_counter() - start) * 1000 / args.batches
    if round_ > 0:
        results["numpy"].append(numpy_ms)
        results["heterodl.tf"].append(tf_ms)

del dataset, numpy_loader, tf_loader  # their connections close before the server does
server.terminate()
server.wait()
numpy_ms = statistics.median(results["numpy"])
tf_ms = statistics.median(results["heterodl.tf"])
print(f"TensorFlow {tf.__version__}, batch {args.batch_size} x 224 x 224 x 3, "
      f"{args.rounds} rounds of {args.batches} held batches")
print(f"NumPy batches + tf.convert_to_tensor: {numpy_ms:.2f} ms per batch "
      f"({', '.join(f'{v:.1f}' for v in results['numpy'])})")
print(f"heterodl.tf.dataset:                  {tf_ms:.2f} ms per batch "
      f"({', '.join(f'{v:.1f}' for v in results['heterodl.tf'])})")
print(f"ratio heterodl.tf / NumPy: {tf_ms / numpy_ms:.3f} (target <= 1.05)")
