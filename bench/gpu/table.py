"""Prints bench/gpu/run.sh's table from its runs' records.

    python table.py OUT_DIR

Each run left OUT_DIR/<model>-<feed>.json (torch_train.py) or .jsonl
(heterodl's --metrics-file). Steady state: epochs after the first (start-up,
cuDNN's first calls and the first epoch's pipeline fill left out).
"""

import json
import os
import sys


def steps_of(path):
    """[(epoch, step_ms, data_wait_ms)], batch size."""
    if path.endswith(".jsonl"):
        rows = [json.loads(line) for line in open(path) if line.strip()]
        steps = [r for r in rows if "summary" not in r]
        batch = steps[0].get("batchSize", steps[0].get("batch_size", 256)) if steps else 256
        return [(r.get("epoch", 0), r["stepMs"] if "stepMs" in r else r["step_ms"],
                 r.get("dataWaitMs", r.get("data_wait_ms", 0.0))) for r in steps], batch
    record = json.load(open(path))
    return [tuple(s) for s in record["steps"]], record["batch_size"]


def summarize(path):
    steps, batch = steps_of(path)
    steady = [s for s in steps if s[0] >= 1] or steps
    step_ms = sum(s[1] for s in steady) / len(steady)
    wait_ms = sum(s[2] for s in steady) / len(steady)
    return {"step_ms": step_ms, "images_per_sec": batch * 1000.0 / step_ms,
            "stall": 100.0 * wait_ms / step_ms, "steps": len(steps)}


FEEDS = [
    ("synthetic", "heterodl trainer, synthetic batches (the GPU's limit)"),
    ("synthetic-contiguous", "  the same, --memory-format contiguous (NCHW)"),
    ("eager-synthetic", "eager PyTorch, GPU-resident batch"),
    ("heterodl", "heterodl, 1 server x {threads} threads"),
    ("heterodl-nice0", "  the same, decode threads not niced (--worker-nice 0)"),
    ("python-heterodl", "PyTorch trainer, heterodl Python loader (wheel), 1 x {threads}"),
    ("dataloader-pil", "DataLoader, {threads} workers, PIL"),
    ("dataloader-tensor", "DataLoader, {threads} workers, torchvision.io"),
    ("heterodl-4core", "4-core trainer, heterodl on the other {rest} cores"),
    ("dataloader-tensor-4core", "4-core trainer, DataLoader (3 workers, torchvision.io)"),
]


WORKLOAD_FEEDS = [
    ("heterodl", "heterodl's Python loader, 1 server x {threads} threads"),
    ("dataloader", "DataLoader, {threads} workers, torchvision.io + v2"),
    ("heterodl-4core", "4-core trainer, heterodl on the other {rest} cores"),
    ("dataloader-4core", "4-core trainer, DataLoader (3 workers)"),
]


def main():
    out = sys.argv[1]
    threads = int(os.environ.get("THREADS", "15"))
    rest = int(os.environ.get("REST", "12"))
    results = {}
    batch = int(os.environ.get("BATCH", "256"))
    for model in os.environ.get("MODELS", "").split():
        print(f"\n{model}, batch {batch}, bf16, steady state (epochs 2+)")
        print(f"  {'feed':58s} {'ms/step':>8s} {'images/s':>9s} {'stall':>6s} {'vs GPU limit':>12s}")
        limit = None
        for feed, title in FEEDS:
            name = os.path.join(out, f"{model}-{feed}")
            path = next((p for p in (name + ".jsonl", name + ".json") if os.path.exists(p)), None)
            if path is None:
                print(f"  {title.format(threads=threads, rest=rest):58s} {'(no run)':>8s}")
                continue
            row = summarize(path)
            results[(model, feed)] = row
            if feed == "synthetic":
                limit = row["images_per_sec"]
            ratio = row["images_per_sec"] / limit if limit else 0
            print(f"  {title.format(threads=threads, rest=rest):58s} {row['step_ms']:8.1f} "
                  f"{row['images_per_sec']:9.0f} {row['stall']:5.1f}% {ratio:12.2f}")
        ours, peer = results.get((model, "heterodl")), results.get((model, "dataloader-tensor"))
        if ours and peer:
            print(f"  heterodl / DataLoader (torchvision.io), same cores: "
                  f"{ours['images_per_sec'] / peer['images_per_sec']:.2f}x")
        ours, peer = (results.get((model, "heterodl-4core")),
                      results.get((model, "dataloader-tensor-4core")))
        if ours and peer:
            print(f"  4-core scenario, heterodl / DataLoader on the 4 cores: "
                  f"{ours['images_per_sec'] / peer['images_per_sec']:.2f}x")
    for workload in os.environ.get("WORKLOADS", "").split():
        print(f"\n{workload}, bf16, steady state (epochs 2+)")
        print(f"  {'feed':58s} {'ms/step':>8s} {'images/s':>9s} {'stall':>6s}")
        rows = {}
        for feed, title in WORKLOAD_FEEDS:
            path = os.path.join(out, f"{workload}-{feed}.json")
            if not os.path.exists(path):
                print(f"  {title.format(threads=threads, rest=rest):58s} {'(no run)':>8s}")
                continue
            row = rows[feed] = summarize(path)
            print(f"  {title.format(threads=threads, rest=rest):58s} {row['step_ms']:8.1f} "
                  f"{row['images_per_sec']:9.1f} {row['stall']:5.1f}%")
        for ours, peer, where in (("heterodl", "dataloader", "same cores"),
                                  ("heterodl-4core", "dataloader-4core", "4-core scenario")):
            if ours in rows and peer in rows:
                print(f"  heterodl / DataLoader, {where}: "
                      f"{rows[ours]['images_per_sec'] / rows[peer]['images_per_sec']:.2f}x")


if __name__ == "__main__":
    main()
