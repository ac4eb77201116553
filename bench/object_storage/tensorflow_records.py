"""Records written by TensorFlow itself, read by heterodl: an image folder
written as TFRecord files with tf.io.TFRecordWriter and tf.train.Example
(TensorFlow's ImageNet keys, labels from 1 as its ImageNet files number
them), then one epoch of the folder and one of the records through `heterodl
serve`, compared batch for batch, pixel for pixel.

The tests write their records with the `tfrecord` package (the test venv
carries no TensorFlow); this checks the same reader against TensorFlow's own
writer, with TensorFlow in a venv of its own:

    python3 -m venv ~/.cache/heterodl-peers/tf && ~/.cache/heterodl-peers/tf/bin/pip install tensorflow-cpu
    PYTHONPATH=build/python .venv/bin/python bench/object_storage/tensorflow_records.py \\
        --tf-python ~/.cache/heterodl-peers/tf/bin/python --dataset data/sample-2k
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy

import heterodl

WRITE = r"""
import os, sys
import tensorflow as tf
folder, out, per_file = sys.argv[1], sys.argv[2], int(sys.argv[3])
classes = sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d)))
samples = [(os.path.join(folder, c, f), label) for label, c in enumerate(classes)
           for f in sorted(os.listdir(os.path.join(folder, c)))]
count = (len(samples) + per_file - 1) // per_file
for i in range(count):
    with tf.io.TFRecordWriter(os.path.join(out, f"train-{i:05d}-of-{count:05d}")) as writer:
        for path, label in samples[i * per_file:(i + 1) * per_file]:
            with open(path, "rb") as f:
                image = f.read()
            feature = {
                "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image])),
                "image/class/label": tf.train.Feature(
                    int64_list=tf.train.Int64List(value=[label + 1])),
                "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"JPEG"])),
            }
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString())
print(tf.__version__, len(samples), count)
"""


def serve(heterodl_binary, dataset, tmp, *extra):
    port_file = os.path.join(tmp, f"port-{time.monotonic_ns()}")
    log = open(port_file + ".log", "w")
    server = subprocess.Popen([heterodl_binary, "serve", "--dataset", dataset, "--address",
                               "127.0.0.1:0", "--port-file", port_file, "--threads", "2",
                               *extra], stderr=log)
    while not os.path.exists(port_file):
        if server.poll() is not None:
            sys.exit(f"serve {dataset} failed:\n{open(port_file + '.log').read()}")
        time.sleep(0.05)
    with open(port_file) as f:
        return server, f"127.0.0.1:{int(f.read())}"


def epoch(address):
    loader = heterodl.RemoteDataLoader(servers=address, batch_size=64, seed=3, format="numpy",
                                       pipeline="random_resized_crop(64)|hflip(0.5)")
    loader.set_epoch(1)
    return [(numpy.array(batch.images), numpy.array(batch.labels)) for batch in loader]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tf-python", required=True, help="a Python with TensorFlow")
    parser.add_argument("--dataset", default="data/sample-2k", help="an image folder")
    parser.add_argument("--heterodl", default="build/heterodl")
    parser.add_argument("--per-file", type=int, default=100)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="heterodl-tf-records-")
    servers = []
    try:
        records = os.path.join(tmp, "records")
        os.makedirs(records)
        written = subprocess.run(
            [args.tf_python, "-c", WRITE, args.dataset, records, str(args.per_file)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True)
        version, samples, files = written.stdout.split()
        for dataset, extra in [(args.dataset, ()), (records, ("--tfrecord-label-offset", "1"))]:
            servers.append(serve(args.heterodl, dataset, tmp, *extra))
        folder_batches, record_batches = (epoch(address) for _, address in servers)
        same = len(folder_batches) == len(record_batches) and all(
            numpy.array_equal(a_images, b_images) and numpy.array_equal(a_labels, b_labels)
            for (a_images, a_labels), (b_images, b_labels) in zip(folder_batches,
                                                                  record_batches))
        print(f"TensorFlow {version} wrote {samples} records in {files} files; heterodl read "
              f"{sum(len(labels) for _, labels in record_batches)} samples in "
              f"{len(record_batches)} batches: "
              + ("the image folder's batches, pixel for pixel" if same else "DIFFERENT batches"))
        sys.exit(0 if same else 1)
    finally:
        for server, _ in servers:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
