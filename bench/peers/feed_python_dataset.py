"""`heterodl bench feed --python-dataset MODULE:CALLABLE`: a user's own
PyTorch Dataset fed to a consumer two ways, one after the other on the same
cores: PyTorch's DataLoader with N worker processes in the consumer's
process, and `heterodl serve --python-dataset` with N worker processes read
by RemoteDataLoader. Both collate with default_collate's semantics; the
consumer only touches each batch. Prints one JSON object:

    {"dataloader": {...}, "heterodl": {...}, "ratio": R, "cpu_ratio": C}

each side with images/s, CPU seconds per batch of the consumer process
alone and of the trainer's host (the consumer and the processes it started:
the DataLoader's workers; heterodl's server stands for a data host and is
not counted), and microseconds per sample. cpu_ratio compares the trainer
host's.
"""

import argparse
import atexit
import importlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import torch
from torch.utils.data import DataLoader


def own_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def host_cpu_seconds(exclude=()):
    """CPU seconds of this process and every process below it (the
    DataLoader's workers), leaving out the trees of `exclude` (the heterodl
    server, which stands for another host): what the trainer's host spends."""
    parents, ticks = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue  # ended meanwhile
        parents[int(entry)] = int(fields[1])
        ticks[int(entry)] = int(fields[11]) + int(fields[12])
    mine, stop = {os.getpid()}, set(exclude)
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in mine and pid not in mine and pid not in stop:
                mine.add(pid)
                grew = True
    return sum(ticks.get(pid, 0) for pid in mine) / os.sysconf("SC_CLK_TCK")


def consume(batches_of_epoch, seconds, exclude=()):
    """Epochs one after another until `seconds` have passed (at least one
    epoch), the clock and CPU counted from the first batch."""
    images = batches = 0
    start = cpu = host = None
    epoch = 0
    while start is None or time.perf_counter() - start < seconds:
        for batch in batches_of_epoch(epoch):
            if start is None:
                start, cpu, host = (time.perf_counter(), own_cpu_seconds(),
                                    host_cpu_seconds(exclude))
                continue  # start-up is not the feed
            first = batch[0]
            images += int(first.shape[0])
            batches += 1
        epoch += 1
    elapsed = time.perf_counter() - start
    used = own_cpu_seconds() - cpu
    host_used = host_cpu_seconds(exclude) - host
    return {"images": images, "seconds": round(elapsed, 3),
            "images_per_sec": round(images / elapsed, 1),
            "consumer_cpu_seconds_per_batch": round(used / max(batches, 1), 5),
            "trainer_host_cpu_seconds_per_batch": round(host_used / max(batches, 1), 5),
            "microseconds_per_sample": round(1e6 * elapsed / max(images, 1), 1)}


def with_dataloader(spec, python_path, args):
    for folder in python_path:
        sys.path.insert(0, folder)
    module, _, name = spec.partition(":")
    dataset = getattr(importlib.import_module(module), name)()
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers, persistent_workers=True, drop_last=True)

    def epoch(e):
        torch.manual_seed(e)
        return loader
    return consume(epoch, args.seconds)


def with_heterodl(spec, python_path, args):
    import heterodl
    tmp = tempfile.mkdtemp(prefix="heterodl-bench-pydataset-")
    port_file = os.path.join(tmp, "port")
    command = [args.heterodl, "serve", "--python-dataset", spec, "--python", sys.executable,
               "--python-workers", str(args.workers), "--address", "127.0.0.1:0",
               "--port-file", port_file, "--idle-timeout", "30s"]
    for folder in python_path:
        command += ["--python-path", folder]
    server = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while not (os.path.exists(port_file) and os.path.getsize(port_file)):
            if server.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"heterodl serve did not start (exit {server.poll()})")
            time.sleep(0.05)
        with open(port_file) as f:
            address = f"127.0.0.1:{int(f.read())}"
        loader = heterodl.RemoteDataLoader(address, batch_size=args.batch_size,
                                           drop_last=True, format="torch")

        def epoch(e):
            loader.set_epoch(e)
            return loader
        result = consume(epoch, args.seconds, exclude=[server.pid])
        loader.shutdown_servers()
        server.wait(timeout=30)
        return result
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def image_list(folder):
    """A file list (path<TAB>label) of an image folder, classes sorted."""
    out = os.path.join(tempfile.mkdtemp(prefix="heterodl-bench-files-"), "files.txt")
    classes = sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d)))
    with open(out, "w") as f:
        for label, name in enumerate(classes):
            for file in sorted(os.listdir(os.path.join(folder, name))):
                f.write(f"{os.path.join(os.path.abspath(folder), name, file)}\t{label}\n")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, help="MODULE:CALLABLE")
    parser.add_argument("--python-path", action="append", default=[])
    parser.add_argument("--heterodl", required=True)
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--images", default="",
                        help="an image folder (CLASS/FILE): python_datasets:photos reads it")
    args = parser.parse_args()
    if args.images:
        os.environ["HETERODL_BENCH_FILES"] = image_list(args.images)
        atexit.register(shutil.rmtree, os.path.dirname(os.environ["HETERODL_BENCH_FILES"]),
                        ignore_errors=True)
    report = {"dataset": args.dataset, "workers": args.workers, "batch_size": args.batch_size}
    report["dataloader"] = with_dataloader(args.dataset, args.python_path, args)
    report["heterodl"] = with_heterodl(args.dataset, args.python_path, args)
    ours, theirs = report["heterodl"], report["dataloader"]
    report["ratio"] = round(ours["images_per_sec"] / theirs["images_per_sec"], 3)
    # The trainer's host: the DataLoader's workers run there, heterodl's on
    # the data hosts.
    report["cpu_ratio"] = round(ours["trainer_host_cpu_seconds_per_batch"]
                                / max(theirs["trainer_host_cpu_seconds_per_batch"], 1e-9), 3)
    for side in ("dataloader", "heterodl"):
        r = report[side]
        print(f"{side:>10}: {r['images_per_sec']:8.1f} images/s, trainer host "
              f"{1e3 * r['trainer_host_cpu_seconds_per_batch']:7.2f} ms CPU/batch (consumer "
              f"process {1e3 * r['consumer_cpu_seconds_per_batch']:.2f}), "
              f"{r['microseconds_per_sample']:.0f} us/sample", file=sys.stderr)
    print(f"heterodl / DataLoader: {report['ratio']:.2f}x images/s, {report['cpu_ratio']:.3f}x "
          "trainer-host CPU per batch", file=sys.stderr)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
