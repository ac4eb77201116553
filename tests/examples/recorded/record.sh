#!/usr/bin/env bash
# Records what tests/examples/examples_test.py checks SageMaker's metric
# definitions (examples/sagemaker/launch.py) against, offline: the log of a
# real one-machine run (what CloudWatch receives from each host) and that
# run's metrics file, whose rows the definitions must find in the log.
#
#   bash tests/examples/recorded/record.sh [BUILD_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../../../build}" && pwd)
work=$(mktemp -d /tmp/heterodl-record-XXXXXX)
trap 'rm -rf "$work"' EXIT
"$build/heterodl" dataset sample "$work/data" --images 120 --formats mixed > /dev/null
# A modelled accelerator (80 ms a step) on CPU, so the log shows waits and
# stalls as a GPU run's would; two data servers, one rank.
"$build/heterodl" local --dataset "$work/data" --servers 2 --threads 1 --ranks 1 \
  --device cpu --device-step-ms 80 --batch-size 8 --epochs 2 \
  --metrics-file "$work/steps.jsonl" 2> "$work/job.log"
# Host names and times are the run's; nothing else is kept from the machine.
cp "$work/job.log" "$here/sagemaker_job.log"
cp "$work/steps.jsonl" "$here/sagemaker_steps.jsonl"
echo "recorded $(grep -c . "$here/sagemaker_job.log") log lines, $(grep -vc summary "$here/sagemaker_steps.jsonl") steps"
