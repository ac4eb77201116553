#!/usr/bin/env bash
# The main job: sets up, builds, writes the built-in sample dataset and runs a
# heterogeneous job on this machine (2 data servers + 2 trainer ranks on
# loopback, one short epoch), printing step times and the data-wait share.
# Extra arguments go to `heterodl local` (e.g. --epochs 3 --batch-size 64).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
./build/heterodl dataset sample data/sample --images 512
./build/heterodl local --dataset data/sample --servers 2 --ranks 2 --epochs 1 \
  --batch-size 32 --metrics-file data/metrics.jsonl "$@"
