"""heterodl against the loaders a user would reach for, all reading the same
images from the same bucket, on the same cores, in one sitting.

nginx serves a local image folder as an S3 bucket (path-style, every request
delayed by --latency-ms, as in feed_from_bucket.py), plus the same images
written as MosaicML Streaming's MDS shards. Each consumer decodes and
augments (random_resized_crop(224) + hflip) into uint8 batches of 256 for
--seconds after its first batches, and prints the images/s it got:

- heterodl: `heterodl serve --dataset s3://bench/FOLDER/` (--threads cores)
  and a Python RemoteDataLoader;
- a torch DataLoader whose workers GET each sample with boto3, decode with
  PIL and augment with torchvision.transforms.v2 (the best of --workers);
- MosaicML Streaming: a StreamingDataset of the MDS shards (downloaded into a
  fresh local cache: the first epoch, as a new data host sees it), the same
  decode and augment in a DataLoader's workers (the best of --workers);
- s3torchconnector's S3MapDataset over the folder's images, likewise.

    python3 bench/object_storage/peers_from_bucket.py --heterodl build/heterodl \\
        --dataset data/sample-20k --peers-python ~/.cache/heterodl-peers/streaming/bin/python

The peers' Python needs torch, torchvision, Pillow, boto3, mosaicml-streaming
and s3torchconnector: bench/object_storage/make_peers_venv.sh makes one.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import feed_from_bucket as bucket  # noqa: E402

# Runs in the peers' Python: argv = kind, endpoint, prefix, workers,
# seconds, local cache. Prints "images seconds versions-json".
PEER = r"""
import io, json, os, sys, time
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2

kind, endpoint, prefix, workers, seconds, cache = sys.argv[1:7]
workers, seconds = int(workers), float(seconds)
augment = v2.Compose([v2.PILToTensor(), v2.RandomResizedCrop(224, antialias=True),
                      v2.RandomHorizontalFlip()])

def decode(data):
    return augment(Image.open(io.BytesIO(data)).convert("RGB"))

versions = {"torch": torch.__version__, "pillow": Image.__version__}
if kind in ("boto3", "s3torchconnector"):
    # The images below the prefix (not the folder's other files).
    import boto3
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    keys = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(
        Bucket="bench", Prefix=prefix) for o in page.get("Contents", [])
        if os.path.splitext(o["Key"])[1].lower() in (".jpg", ".jpeg", ".png", ".webp")]
    classes = sorted({key[len(prefix):].split("/")[0] for key in keys})
if kind == "boto3":
    versions["boto3"] = boto3.__version__

    class Boto3Images(Dataset):
        client = None

        def __len__(self):
            return len(keys)

        def __getitem__(self, i):
            if Boto3Images.client is None:  # one per worker process
                Boto3Images.client = boto3.client("s3", endpoint_url=endpoint,
                                                  region_name="us-east-1")
            data = Boto3Images.client.get_object(Bucket="bench", Key=keys[i])["Body"].read()
            return decode(data), classes.index(keys[i][len(prefix):].split("/")[0])

    dataset = Boto3Images()
elif kind == "s3torchconnector":
    import s3torchconnector
    from s3torchconnector import S3ClientConfig, S3MapDataset
    versions["s3torchconnector"] = s3torchconnector.__version__

    def transform(reader):
        return decode(reader.read()), classes.index(reader.key[len(prefix):].split("/")[0])

    dataset = S3MapDataset.from_objects(
        [f"s3://bench/{key}" for key in keys], region="us-east-1", endpoint=endpoint,
        transform=transform, s3client_config=S3ClientConfig(force_path_style=True))
else:
    import streaming
    from streaming import StreamingDataset
    versions["mosaicml-streaming"] = streaming.__version__

    class Mds(StreamingDataset):
        def __getitem__(self, i):
            sample = super().__getitem__(i)
            return decode(sample["image"]), sample["label"]

    dataset = Mds(remote=f"s3://bench/{prefix}", local=cache, shuffle=True, batch_size=256)
loader = DataLoader(dataset, batch_size=256, shuffle=kind != "streaming", num_workers=workers,
                    persistent_workers=True, prefetch_factor=4)
images, started, warm = 0, None, 0
while started is None or time.monotonic() - started < seconds:
    for batch, labels in loader:
        warm += 1
        if warm == 3:
            started = time.monotonic()  # workers up, caches filling
        elif started is not None:
            images += batch.shape[0]
            if time.monotonic() - started >= seconds:
                break
print(images, time.monotonic() - started, json.dumps(versions))
"""

# Runs in heterodl's venv: argv = server address, seconds.
HETERODL = r"""
import sys, time, heterodl
loader = heterodl.RemoteDataLoader(servers=sys.argv[1], batch_size=256, format="numpy")
seconds, images, started, warm, epoch = float(sys.argv[2]), 0, None, 0, 0
while started is None or time.monotonic() - started < seconds:
    loader.set_epoch(epoch)
    epoch += 1
    for batch in loader:
        warm += 1
        if warm == 3:
            started = time.monotonic()
        elif started is not None:
            images += len(batch.labels)
            if time.monotonic() - started >= seconds:
                break
print(images, time.monotonic() - started, heterodl.__version__)
"""


def write_mds(python, dataset, out):
    """The folder's images as MDS shards (image bytes + label), written by
    Streaming's own MDSWriter."""
    script = r"""
import os, sys
from streaming import MDSWriter
folder, out = sys.argv[1:3]
classes = sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d)))
with MDSWriter(out=out, columns={"image": "bytes", "label": "int"}, size_limit=1 << 26) as w:
    for label, name in enumerate(classes):
        for file in sorted(os.listdir(os.path.join(folder, name))):
            with open(os.path.join(folder, name, file), "rb") as f:
                w.write({"image": f.read(), "label": label})
"""
    subprocess.run([python, "-c", script, dataset, out], check=True, timeout=1800)


def run_peer(args, kind, endpoint, prefix, workers, root):
    cache = tempfile.mkdtemp(prefix="streaming-cache-", dir=root)
    environment = dict(os.environ, S3_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="bench",
                       AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
                       AWS_EC2_METADATA_DISABLED="true")
    try:
        result = subprocess.run(
            [args.peers_python, "-c", PEER, kind, endpoint, prefix, str(workers),
             str(args.seconds), cache],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment,
            timeout=args.seconds * 20 + 600)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if result.returncode != 0:
        return None, result.stderr.strip().splitlines()[-8:] or ["failed"]
    images, seconds, versions = result.stdout.split(maxsplit=2)
    return int(images) / float(seconds), json.loads(versions)


def run_heterodl(args, endpoint, prefix, root):
    port_file = f"{root}/heterodl-port"
    with open(f"{root}/serve.log", "w") as log:
        server = subprocess.Popen(
            [args.heterodl, "serve", "--dataset", f"s3://bench/{prefix}", "--address",
             "127.0.0.1:0", "--port-file", port_file, "--threads", str(args.threads),
             "--s3-endpoint", endpoint, "--s3-no-sign"], stderr=log)
    try:
        while not os.path.exists(port_file):
            if server.poll() is not None:
                sys.exit(f"serve did not start:\n{open(f'{root}/serve.log').read()[-3000:]}")
            time.sleep(0.1)
        with open(port_file) as f:
            address = f"127.0.0.1:{int(f.read())}"
        environment = dict(os.environ, PYTHONPATH=os.path.join(
            os.path.dirname(os.path.abspath(args.heterodl)), "python"))
        result = subprocess.run([args.python, "-c", HETERODL, address, str(args.seconds)],
                                stdout=subprocess.PIPE, text=True, env=environment, check=True,
                                timeout=args.seconds * 20 + 600)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    images, seconds, version = result.stdout.split()
    return int(images) / float(seconds), version


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heterodl", default="build/heterodl")
    parser.add_argument("--dataset", default="data/sample-20k", help="a local image folder")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="heterodl's server threads (the machine's cores)")
    parser.add_argument("--workers", default="2,8,16",
                        help="the peers' DataLoader workers to try; the best is reported")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--latency-ms", type=float, default=20)
    parser.add_argument("--python", default=".venv/bin/python", help="heterodl's venv")
    parser.add_argument("--peers-python",
                        default=os.path.expanduser("~/.cache/heterodl-peers/streaming/bin/python"))
    parser.add_argument("--peers", default="boto3,streaming,s3torchconnector")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    dataset = os.path.abspath(args.dataset)
    root = tempfile.mkdtemp(prefix="heterodl-peers-bucket-")
    os.chmod(root, 0o755)
    report = {"dataset": args.dataset, "latency_ms": args.latency_ms, "threads": args.threads,
              "seconds": args.seconds, "peers": {}}
    try:
        os.makedirs(f"{root}/tmp")
        os.makedirs(f"{root}/bucket")
        prefix = os.path.basename(dataset.rstrip("/")) + "/"
        os.symlink(dataset, f"{root}/bucket/{prefix.rstrip('/')}")
        if "streaming" in args.peers:
            write_mds(args.peers_python, dataset, f"{root}/bucket/mds")
            os.chmod(f"{root}/bucket/mds", 0o755)
        nginx, port, _ = bucket.start_bucket(root, dataset, prefix, args.latency_ms, 0)
        endpoint = f"http://127.0.0.1:{port}"
        try:
            rate, version = run_heterodl(args, endpoint, prefix, root)
            report["heterodl_images_per_sec"] = rate
            report["heterodl_version"] = version
            for kind in args.peers.split(","):
                best = None
                tries = {}
                for workers in [int(w) for w in args.workers.split(",")]:
                    peer_prefix = "mds" if kind == "streaming" else prefix
                    peer_rate, versions = run_peer(args, kind, endpoint, peer_prefix, workers,
                                                   root)
                    tries[workers] = peer_rate if peer_rate is not None else " ".join(versions)
                    if peer_rate is not None and (best is None or peer_rate > best[0]):
                        best = (peer_rate, workers, versions)
                report["peers"][kind] = {"tries": tries}
                if best is not None:
                    report["peers"][kind].update(
                        images_per_sec=best[0], workers=best[1], versions=best[2],
                        heterodl_ratio=rate / best[0])
        finally:
            nginx.send_signal(signal.SIGQUIT)
            nginx.wait(timeout=30)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(report))
        return
    print(f"from one bucket (nginx, {args.latency_ms:g} ms a request), {args.dataset}, "
          f"decode + random_resized_crop(224) + hflip, batches of 256, {args.seconds:g} s "
          f"each, this machine's {os.cpu_count()} cores shared by all:")
    print(f"  heterodl {report['heterodl_version']} ({args.threads} server threads, Python "
          f"loader)  {report['heterodl_images_per_sec']:8.0f} images/s")
    for kind, peer in report["peers"].items():
        if "images_per_sec" not in peer:
            print(f"  {kind:40s} did not run: {peer['tries']}")
            continue
        print(f"  {kind} {peer['versions']} (best of workers {args.workers}: "
              f"{peer['workers']})  {peer['images_per_sec']:8.0f} images/s; heterodl "
              f"{peer['heterodl_ratio']:.2f}x; tries {peer['tries']}")


if __name__ == "__main__":
    main()
