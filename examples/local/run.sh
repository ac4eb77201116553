#!/usr/bin/env bash
# Two data servers and a two-rank trainer on loopback, started as separate
# processes (see README.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
HETERODL=./build/heterodl
DATASET=${1:-data/sample}
[[ -d "$DATASET" ]] || "$HETERODL" dataset sample "$DATASET" --images 256

RUN_DIR=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$RUN_DIR"' EXIT
for i in 0 1; do
  "$HETERODL" serve --dataset "$DATASET" --address 127.0.0.1:0 --port-file "$RUN_DIR/port$i" \
    --threads 1 --startup-timeout 120s &
done
for i in 0 1; do
  for _ in $(seq 100); do [[ -s "$RUN_DIR/port$i" ]] && break; sleep 0.1; done
done
SERVERS="127.0.0.1:$(cat "$RUN_DIR/port0"),127.0.0.1:$(cat "$RUN_DIR/port1")"
echo "data servers: $SERVERS"

"$HETERODL" train --data-servers "$SERVERS" --ranks 2 --model small_cnn --steps 40 \
  --batch-size 16 --master-port 29517 &
TRAINER=$!
sleep 2
"$HETERODL" status ${SERVERS//,/ } || true
wait "$TRAINER"
wait   # the servers exit on the trainer's shutdown request
echo "all processes exited"
