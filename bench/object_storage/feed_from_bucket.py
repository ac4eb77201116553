"""Feed from a bucket against feed from local disk, same files, cores and run.

Serves a local image folder as an S3 bucket (path-style) with Debian's nginx,
every request delayed by --latency-ms without blocking (the Lua module's
ngx.sleep), and a share of them answered 503 SlowDown if asked (--slow-down);
then runs `heterodl bench feed` on the folder and on s3://bench/PREFIX/ in the
same sitting, and prints, per run, the images/s a trainer is fed, and for the
bucket: the ratio to local disk, nginx's requests/s, MB/s and CPU, and GETs
per sample built (what reading fetches beyond what it decodes).

    python3 bench/object_storage/feed_from_bucket.py --heterodl build/heterodl \\
        --dataset data/sample-2k --threads 2 --latency-ms 20

With --shards N the folder is first written as WebDataset tar shards of N
samples (local and bucket alike), and --shuffle-block-shards K runs both
with the block-shuffled plan, whose server reads whole chunks of the shards
(--read-chunk-mb) instead of a request per sample.

Needs nginx-light and libnginx-mod-http-lua (apt-get). Standard library only.
"""

import argparse
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from xml.sax.saxutils import escape

MODULES = "/usr/lib/nginx/modules"
SLOW_DOWN = ('<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
             '<Message>Please reduce your request rate.</Message></Error>')


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def listing(dataset, prefix):
    """ListObjectsV2's answer for `prefix`: every file below the folder."""
    keys = []
    for folder, _, names in os.walk(dataset):
        for name in names:
            path = os.path.join(folder, name)
            keys.append((prefix + os.path.relpath(path, dataset), os.path.getsize(path)))
    keys.sort()
    # The fields S3 gives every key (some clients, s3torchconnector's, insist).
    contents = "".join(f"<Contents><Key>{escape(key)}</Key>"
                       f"<LastModified>2026-01-01T00:00:00.000Z</LastModified>"
                       f"<ETag>&quot;0&quot;</ETag><Size>{size}</Size>"
                       f"<StorageClass>STANDARD</StorageClass></Contents>"
                       for key, size in keys)
    return (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>bench</Name>'
            f"<Prefix>{escape(prefix)}</Prefix><KeyCount>{len(keys)}</KeyCount>{contents}"
            f"<IsTruncated>false</IsTruncated></ListBucketResult>"), keys


def nginx_config(root, port, latency_ms, slow_down):
    delay = latency_ms / 1000.0
    lua = f"ngx.sleep({delay})"
    if slow_down > 0:
        lua += (f" if math.random() < {slow_down} then ngx.status = 503"
                f" ngx.header.content_type = 'application/xml' ngx.print('{SLOW_DOWN}')"
                f" return ngx.exit(503) end")
    return f"""
load_module {MODULES}/ndk_http_module.so;
load_module {MODULES}/ngx_http_lua_module.so;
daemon off;
worker_processes 1;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  log_format fetched '$request_method $status $body_bytes_sent';
  access_log {root}/access.log fetched;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  client_body_temp_path {root}/tmp;
  server {{
    listen 127.0.0.1:{port};
    location ~ ^/bench/?$ {{
      access_by_lua_block {{ {lua} }}
      default_type application/xml;
      root {root};
      try_files /listing.xml =404;
    }}
    location /bench/ {{
      access_by_lua_block {{ {lua} }}
      alias {root}/bucket/;
    }}
  }}
}}
"""


def start_bucket(root, dataset, prefix, latency_ms, slow_down):
    """nginx serving `dataset` (a folder already linked at
    ROOT/bucket/PREFIX) as bucket "bench" on a free loopback port, once it
    answers: (its process, its port, the listed (key, size) pairs)."""
    text, keys = listing(dataset, prefix)
    with open(f"{root}/listing.xml", "w") as f:
        f.write(text)
    port = free_port()
    with open(f"{root}/nginx.conf", "w") as f:
        f.write(nginx_config(root, port, latency_ms, slow_down))
    nginx = subprocess.Popen(["nginx", "-c", f"{root}/nginx.conf", "-p", root])
    deadline = time.time() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return nginx, port, keys
        except OSError:
            if time.time() > deadline or nginx.poll() is not None:
                nginx.kill()
                sys.exit("nginx did not start (nginx -t -c CONFIG says why)")
            time.sleep(0.1)


def cpu_seconds(pid):
    """User + system CPU of process `pid` and its children so far."""
    total = 0.0
    for candidate in [pid] + children(pid):
        try:
            with open(f"/proc/{candidate}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            pass
    return total


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def access_log_since(path, offset):
    with open(path) as f:
        f.seek(offset)
        lines = f.read().splitlines()
    gets = [line.split() for line in lines if line.startswith("GET ")]
    return {"requests": len(lines), "gets": len(gets),
            "status_503": sum(1 for g in gets if g[1] == "503"),
            "bytes": sum(int(g[2]) for g in gets)}


def write_shards(folder, shards_root, per_shard):
    """The image folder's samples as WebDataset shards (KEY.EXT + KEY.cls),
    in the folder's order: classes sorted by name, files within a class."""
    classes = sorted(name for name in os.listdir(folder)
                     if os.path.isdir(os.path.join(folder, name)))
    samples = [(os.path.join(folder, name, file), label)
               for label, name in enumerate(classes)
               for file in sorted(os.listdir(os.path.join(folder, name)))]
    os.makedirs(shards_root)
    for first in range(0, len(samples), per_shard):
        path = os.path.join(shards_root, f"train-{first // per_shard:05d}.tar")
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for i, (image, label) in enumerate(samples[first:first + per_shard], start=first):
                tar.add(image, arcname=f"s{i:07d}{os.path.splitext(image)[1]}")
                info = tarfile.TarInfo(f"s{i:07d}.cls")
                text = str(label).encode()
                info.size = len(text)
                tar.addfile(info, io.BytesIO(text))
    return len(samples)


def feed(args, dataset, extra, log_path):
    """`heterodl bench feed` of `dataset`: its JSON report, and the samples
    its data server built (from the server's last line)."""
    command = [args.heterodl, "bench", "feed", "--dataset", dataset, "--threads",
               str(args.threads), "--seconds", str(args.seconds), "--rounds", str(args.rounds),
               "--shuffle-block-shards", str(args.shuffle_block_shards), "--json", *extra]
    started = time.monotonic()
    with open(log_path, "w") as log:
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=log, text=True,
                                timeout=3600)
    wall = time.monotonic() - started
    with open(log_path) as f:
        text = f.read()
    if result.returncode != 0:
        sys.exit(f"bench feed {dataset} failed ({result.returncode}):\n{text[-3000:]}")
    served = [int(m) for m in re.findall(r"stopped: \d+ batches, (\d+) samples", text)]
    storage = re.findall(r"object storage: .*", text)
    return json.loads(result.stdout), sum(served), wall, storage[-1] if storage else ""


# One loader reading `epochs` epochs of batches of 256 with the plan asked
# for, as a trainer would (run with the venv's Python, heterodl importable).
STEADY_LOADER = """
import sys, time, heterodl
address, block, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
loader = heterodl.RemoteDataLoader(servers=address, batch_size=256, format="numpy",
                                   shuffle_block_shards=block)
samples, started = 0, time.monotonic()
for epoch in range(epochs):
    loader.set_epoch(epoch)
    for batch in loader:
        samples += len(batch.labels)
print(samples, time.monotonic() - started)
"""


def steady(args, url, extra, root, access_log):
    """One server on the bucket and one loader over whole epochs, nothing
    else (bench feed's runs include epochs of one batch, whose batches span
    the whole plan): the requests/s and bytes/s the server makes, and the
    samples it built, over that time."""
    port_file = f"{root}/steady-port"
    log_path = f"{root}/steady.log"
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            [args.heterodl, "serve", "--dataset", url, "--address", "127.0.0.1:0",
             "--port-file", port_file, "--threads", str(args.threads), *extra], stderr=log)
    try:
        deadline = time.time() + 600
        while not os.path.exists(port_file):
            if server.poll() is not None or time.time() > deadline:
                sys.exit(f"serve {url} did not start:\n{open(log_path).read()[-3000:]}")
            time.sleep(0.1)
        with open(port_file) as f:
            address = f"127.0.0.1:{int(f.read())}"
        offset = os.path.getsize(access_log)
        environment = dict(os.environ, PYTHONPATH=os.path.join(
            os.path.dirname(os.path.abspath(args.heterodl)), "python"))
        result = subprocess.run(
            [args.python, "-c", STEADY_LOADER, address, str(args.shuffle_block_shards),
             str(args.steady_epochs)],
            stdout=subprocess.PIPE, text=True, env=environment, timeout=3600, check=True)
        samples, seconds = result.stdout.split()
        fetched = access_log_since(access_log, offset)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    storage = re.findall(r"object storage: .*", open(log_path).read())
    return int(samples), float(seconds), fetched, storage[-1] if storage else ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heterodl", default="build/heterodl")
    parser.add_argument("--dataset", default="data/sample-2k", help="a local image folder")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=20)
    parser.add_argument("--slow-down", type=float, default=0.0,
                        help="share of requests answered 503 SlowDown (0.05: 5%%)")
    parser.add_argument("--cache-mb", type=int, default=0,
                        help="> 0: the server keeps what it fetches in a local cache this large "
                             "(serve --cache-dir), so later epochs fetch nothing")
    parser.add_argument("--shards", type=int, default=0,
                        help="> 0: serve the folder as tar shards of this many samples")
    parser.add_argument("--shuffle-block-shards", type=int, default=0,
                        help="> 0 (with --shards): the block-shuffled plan over windows of this "
                             "many shards, both runs")
    parser.add_argument("--read-chunk-mb", type=int, default=8,
                        help="the chunks a block plan's server reads shards in")
    parser.add_argument("--chunk-memory-mb", type=int, default=2048,
                        help="the memory that holds them (below the dataset's size, a later "
                             "epoch reads its chunks again, as a dataset larger than memory "
                             "does)")
    parser.add_argument("--steady-epochs", type=int, default=2,
                        help="epochs of the steady run (one server, one loader): the "
                             "requests/s and bytes/s of a trainer's epochs")
    parser.add_argument("--python", default=".venv/bin/python",
                        help="a Python with numpy, for the steady run's loader")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.shuffle_block_shards > 0 and args.shards <= 0:
        sys.exit("--shuffle-block-shards needs --shards: a block plan permutes shards")
    if not os.path.exists(f"{MODULES}/ngx_http_lua_module.so") or not shutil.which("nginx"):
        sys.exit("needs nginx with its Lua module: apt-get install nginx-light "
                 "libnginx-mod-http-lua")
    dataset = os.path.abspath(args.dataset)
    root = tempfile.mkdtemp(prefix="heterodl-bucket-")
    os.chmod(root, 0o755)  # nginx's workers run as its own user
    try:
        os.makedirs(f"{root}/tmp")
        os.makedirs(f"{root}/bucket")
        sample_count = None
        image_bytes = sum(os.path.getsize(os.path.join(folder, name))
                          for folder, _, names in os.walk(dataset) for name in names
                          if not name.startswith("."))
        if args.shards > 0:
            sample_count = write_shards(dataset, f"{root}/shards", args.shards)
            dataset = f"{root}/shards"
            os.chmod(dataset, 0o755)
        prefix = os.path.basename(dataset.rstrip("/")) + "/"
        os.symlink(dataset, f"{root}/bucket/{prefix.rstrip('/')}")
        nginx, port, keys = start_bucket(root, dataset, prefix, args.latency_ms, args.slow_down)
        sample_count = sample_count or len(keys)
        try:
            local, local_served, _, _ = feed(args, dataset, [], f"{root}/local.log")
            offset = os.path.getsize(f"{root}/access.log")
            cpu_before = cpu_seconds(nginx.pid)
            cache = (["--cache-dir", f"{root}/cache", "--cache-mb", str(args.cache_mb)]
                     if args.cache_mb > 0 else [])
            bucket, bucket_served, wall, storage = feed(
                args, f"s3://bench/{prefix}",
                ["--s3-endpoint", f"http://127.0.0.1:{port}", "--s3-no-sign",
                 "--read-chunk-mb", str(args.read_chunk_mb),
                 "--chunk-memory-mb", str(args.chunk_memory_mb), *cache],
                f"{root}/bucket.log")
            nginx_cpu = cpu_seconds(nginx.pid) - cpu_before
            fetched = access_log_since(f"{root}/access.log", offset)
            steady_samples, steady_seconds, steady_fetched, steady_storage = steady(
                args, f"s3://bench/{prefix}",
                ["--s3-endpoint", f"http://127.0.0.1:{port}", "--s3-no-sign",
                 "--read-chunk-mb", str(args.read_chunk_mb),
                 "--chunk-memory-mb", str(args.chunk_memory_mb)],
                root, f"{root}/access.log")
        finally:
            nginx.send_signal(signal.SIGQUIT)
            nginx.wait(timeout=30)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    # The engine's measurements read their files too (min(1024, N) per
    # measurement, rounds + 1 of them), besides the samples the server built.
    # A sample's bytes on average: its image file's (a tar member's, a
    # record's image, less their headers).
    sample_bytes = image_bytes / max(1, sample_count)
    engine_reads = (args.rounds + 1) * min(1024, sample_count)
    fetched_for_batches = fetched["bytes"] - engine_reads * sample_bytes
    local_rate = local["long_epochs"]["images_per_sec"]
    bucket_rate = bucket["long_epochs"]["images_per_sec"]
    report = {
        "files": len(keys), "threads": args.threads, "latency_ms": args.latency_ms,
        "slow_down": args.slow_down,
        "local_images_per_sec": local_rate, "bucket_images_per_sec": bucket_rate,
        "bucket_to_local": bucket_rate / local_rate if local_rate else 0,
        "bucket_boundary_wait_ms_mean": bucket["long_epochs"].get("boundary_wait_ms_mean", 0),
        "bucket_inner_wait_ms_median": bucket["long_epochs"].get("inner_wait_ms_median", 0),
        "requests_per_sec": fetched["requests"] / wall, "mb_per_sec": fetched["bytes"] / wall / 1e6,
        "nginx_cpu_percent": 100 * nginx_cpu / wall, "status_503": fetched["status_503"],
        "samples_built": bucket_served,
        "gets_per_sample_built": (fetched["gets"] - engine_reads) / bucket_served
        if bucket_served else 0,
        "bytes_fetched_per_byte_built": fetched_for_batches / (bucket_served * sample_bytes)
        if bucket_served else 0,
        "shards": args.shards, "shuffle_block_shards": args.shuffle_block_shards,
        "steady_images_per_sec": steady_samples / steady_seconds,
        "steady_requests_per_sec": steady_fetched["requests"] / steady_seconds,
        "steady_mb_per_sec": steady_fetched["bytes"] / steady_seconds / 1e6,
        "steady_gets_per_sample": steady_fetched["gets"] / steady_samples,
        "steady_bytes_fetched_per_byte_built":
            steady_fetched["bytes"] / (steady_samples * sample_bytes),
        "steady_server": steady_storage,
        "server": storage,
    }
    if args.json:
        print(json.dumps(report))
        return
    form = (f"{len(keys)} tar shards of {args.shards} samples of {args.dataset}" if args.shards
            else f"{len(keys)} files of {args.dataset}")
    plan = (f"block-shuffled plan over {args.shuffle_block_shards} shards, "
            f"{args.read_chunk_mb} MiB chunks in {args.chunk_memory_mb} MiB"
            if args.shuffle_block_shards
            else "the default plan (every sample shuffled)")
    print(f"feed from a bucket: {form}, {plan}, {args.threads} server "
          f"threads, nginx path-style with {args.latency_ms:g} ms a request"
          + (f", {100 * args.slow_down:g}% answered 503 SlowDown" if args.slow_down else "")
          + (f", a {args.cache_mb} MiB local cache" if args.cache_mb else ""))
    print(f"  local disk            {local_rate:8.0f} images/s")
    print(f"  s3:// (nginx)         {bucket_rate:8.0f} images/s   {report['bucket_to_local']:.2f}x "
          f"local; waiting in Next() {report['bucket_inner_wait_ms_median']:.1f} ms median, "
          f"{report['bucket_boundary_wait_ms_mean']:.1f} ms at epoch boundaries")
    print(f"  the bucket's side     {report['requests_per_sec']:8.0f} requests/s, "
          f"{report['mb_per_sec']:.1f} MB/s, nginx {report['nginx_cpu_percent']:.0f}% of a core, "
          f"{fetched['status_503']} answered 503")
    print(f"  GETs per sample built {report['gets_per_sample_built']:8.3f} "
          f"({bucket_served} samples built, the engine's {engine_reads} reads aside); bytes "
          f"fetched per byte built {report['bytes_fetched_per_byte_built']:.2f}")
    print(f"  the data server       {storage}")
    print(f"  steady: one server, one loader, {args.steady_epochs} epochs of batches of 256: "
          f"{report['steady_images_per_sec']:.0f} images/s, "
          f"{report['steady_requests_per_sec']:.0f} requests/s, "
          f"{report['steady_mb_per_sec']:.1f} MB/s; "
          f"{report['steady_gets_per_sample']:.3f} GETs and "
          f"{report['steady_bytes_fetched_per_byte_built']:.2f} bytes fetched per sample "
          f"(byte) built")
    print(f"  steady's server       {steady_storage}")


if __name__ == "__main__":
    main()
