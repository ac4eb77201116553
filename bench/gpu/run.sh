#!/usr/bin/env bash
# A short ResNet-50 training on this machine's GPUs, fed by local data
# servers over loopback; prints step time, images/s and the data stall.
#
#   bash bench/gpu/run.sh [STEPS] [BATCH_PER_GPU]
#
# heterodl comes from, in this order: build/ (a build on this machine), a
# fresh build when CMake and the Debian -dev packages are here, or the bundle
# bench/gpu/make_bundle.sh made on a build machine (same torch version;
# carry bench/gpu/bundle.tar.xz).
# torch itself is always this machine's: `python3 -c "import torch"`.
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-60}
batch=${2:-64}
python=${PYTHON:-python3}
torch_lib=$("$python" -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))")
gpus=$("$python" -c "import torch; print(torch.cuda.device_count())")
if [[ "$gpus" -lt 1 && -z "${HETERODL_GPU_RUN_ALLOW_CPU:-}" ]]; then
  echo "no CUDA device visible to $python's torch" >&2
  exit 1
fi
ranks=$(( gpus > 0 ? gpus : 1 ))

if [[ -x build/heterodl-trainer ]]; then
  bin=build
  dataset=${DATASET:-data/sample}
elif command -v cmake >/dev/null && pkg-config --exists grpc++ 2>/dev/null; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHETERODL_BUILD_TESTS=OFF \
    -DHETERODL_PYTHON="$(command -v "$python")"
  cmake --build build-gpu
  bin=build-gpu
  dataset=${DATASET:-data/sample}
elif [[ -x bench/gpu/bundle/bin/heterodl-trainer || -f bench/gpu/bundle.tar.xz ]]; then
  [[ -x bench/gpu/bundle/bin/heterodl-trainer ]] || tar -xJf bench/gpu/bundle.tar.xz -C bench/gpu
  bin=bench/gpu/bundle/bin
  dataset=${DATASET:-bench/gpu/bundle/sample}
  export LD_LIBRARY_PATH="$PWD/bench/gpu/bundle/lib:$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  echo "no heterodl build here: run bench/gpu/make_bundle.sh on a build machine and carry" \
    "bench/gpu/bundle.tar.xz" >&2
  exit 1
fi
[[ -d "$dataset" ]] || "$bin/heterodl" dataset sample "$dataset" --images 512

out=${OUT:-bench/gpu/out}
mkdir -p "$out"
cores=$(nproc)
# The data servers get the cores the ranks do not use.
threads=$(( cores > ranks + 1 ? cores - ranks : 1 ))
device=cuda
[[ "$gpus" -lt 1 ]] && device=cpu
set -x
"$bin/heterodl" local --dataset "$dataset" --data-servers 1 --threads "$threads" \
  --ranks "$ranks" --device "$device" --model resnet50 --batch-size "$batch" --steps "$steps" \
  --warmup-steps 10 --metrics-file "$out/metrics.jsonl" 2>&1 | tee "$out/run.log"
set +x
"$python" - "$out/metrics.jsonl" "$ranks" "$batch" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
steps = [r for r in rows if "summary" not in r]
summary = [r["summary"] for r in rows if "summary" in r][-1]
ranks, batch = int(sys.argv[2]), int(sys.argv[3])
steady = steps[len(steps) // 5:]  # leave out warm-up (cuDNN autotuning, allocator growth)
step_ms = sum(r["step_ms"] for r in steady) / len(steady)
wait_ms = sum(r["data_wait_ms"] for r in steady) / len(steady)
print(f"ResNet-50, {ranks} GPU rank(s), batch {batch} per rank, {len(steps)} steps "
      f"({len(steady)} steady)")
print(f"  step time      {step_ms:8.1f} ms")
print(f"  images/s       {ranks * batch * 1000.0 / step_ms:8.0f}")
print(f"  data stall     {100.0 * wait_ms / step_ms:8.1f} %")
print(f"  whole run      {summary['images_per_sec']:8.0f} images/s, "
      f"stall {summary['data_stall_percent']:.1f} %")
PY
