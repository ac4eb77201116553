#!/usr/bin/env bash
# The pipe in front of a GPU, end to end: ResNet-18 and ResNet-50 trained for
# EPOCHS epochs of IMAGES photo JPEGs, batch BATCH, bf16, on this machine's
# first GPU, fed
#   - by synthetic batches (heterodl's trainer alone: the GPU's limit; NCHW
#     and channels-last), and a GPU-resident batch in eager PyTorch (the
#     reference trainer),
#   - by one heterodl server with all cores but one, to heterodl's C++
#     trainer and to the PyTorch trainer through the Python package (the pip
#     wheel from dist/ or the bundle, installed here with pip),
#   - by PyTorch's DataLoader with as many workers, PIL and torchvision.io,
#   - and the seed's scenario: the trainer pinned to 4 cores, heterodl's
#     server on the others, against the DataLoader on the same 4 cores;
# then prints one table (bench/gpu/table.py).
#
#   bash bench/gpu/run.sh            # EPOCHS=3 IMAGES=10800 BATCH=256
#
# heterodl comes from, in this order: build/ (a build on this machine), a
# fresh build when CMake and the Debian -dev packages are here, or the bundle
# bench/gpu/make_bundle.sh made on a build machine (same torch version;
# carry bench/gpu/bundle.tar.xz). Its sample photos are replicated with links
# up to IMAGES. torch itself is always this machine's: `python3 -c "import torch"`.
set -euo pipefail
cd "$(dirname "$0")/../.."
epochs=${EPOCHS:-3}
images=${IMAGES:-10800}
batch=${BATCH:-256}
python=${PYTHON:-python3}
run_timeout=${RUN_TIMEOUT:-240}
# DEVICE=cpu runs the whole thing without a GPU, to try the script itself.
device=${DEVICE:-cuda}
torch_lib=$("$python" -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))")
if [[ $device == cuda ]] && ! "$python" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
  echo "no CUDA device visible to $python's torch" >&2
  exit 1
fi

if [[ -x build/heterodl-trainer ]]; then
  bin=build
  sample=${SAMPLE:-data/sample}
elif command -v cmake >/dev/null && pkg-config --exists grpc++ 2>/dev/null; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHETERODL_BUILD_TESTS=OFF \
    -DHETERODL_PYTHON="$(command -v "$python")"
  cmake --build build-gpu
  bin=build-gpu
  sample=${SAMPLE:-data/sample}
elif [[ -x bench/gpu/bundle/bin/heterodl-trainer || -f bench/gpu/bundle.tar.xz ]]; then
  [[ -x bench/gpu/bundle/bin/heterodl-trainer ]] || tar -xJf bench/gpu/bundle.tar.xz -C bench/gpu
  bin=bench/gpu/bundle/bin
  sample=${SAMPLE:-bench/gpu/bundle/sample}
  export LD_LIBRARY_PATH="$PWD/bench/gpu/bundle/lib:$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  echo "no heterodl build here: run bench/gpu/make_bundle.sh on a build machine and carry" \
    "bench/gpu/bundle.tar.xz" >&2
  exit 1
fi
photos=${PHOTOS:-}
[[ -z $photos && -d bench/gpu/bundle/photos ]] && photos=bench/gpu/bundle/photos
[[ -z $photos ]] && photos=/usr/share/backgrounds/mate
[[ -d "$sample" ]] || "$bin/heterodl" dataset sample "$sample" --images 512 \
  --source-photos "$photos"

out=${RESULTS:-bench/gpu/out}
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.jsonl

# IMAGES photos: the sample's, linked over and over under their class
# folders (the server and the DataLoader read the same files).
dataset="$out/dataset"
rm -rf "$dataset"
files="$out/files.txt"
: >"$files"
mapfile -t originals < <(cd "$sample" && find . -name '*.jpg' | sort)
classes=$(cd "$sample" && find . -mindepth 1 -maxdepth 1 -type d | sort)
declare -A class_index=()
i=0
for class in $classes; do
  class_index[${class#./}]=$i
  mkdir -p "$dataset/${class#./}"
  i=$((i + 1))
done
sample_path=$(realpath "$sample")
dataset_path=$(realpath "$dataset")
n=0
copy=0
while ((n < images)); do
  for original in "${originals[@]}"; do
    ((n < images)) || break
    relative=${original#./}
    class=${relative%%/*}
    link="$dataset_path/$class/c${copy}_${relative##*/}"
    ln -s "$sample_path/$relative" "$link"
    printf '%s\t%s\n' "$link" "${class_index[$class]}" >>"$files"
    n=$((n + 1))
  done
  copy=$((copy + 1))
done
# The Python package, as a user installs it: the wheel, pip-installed into a
# folder of its own (the machine's torch stays the one imported).
wheel=$(ls dist/heterodl-*manylinux*.whl bench/gpu/bundle/heterodl-*.whl 2>/dev/null | head -1 || true)
python_package=""
if [[ -n $wheel ]] && "$python" -m pip install -q --no-index --no-deps --target "$out/wheel" \
    "$wheel" >>"$out/torch.log" 2>&1; then
  python_package="$out/wheel"
else
  echo "no heterodl wheel to install (bash scripts/build_wheel.sh): the Python rows are left out"
fi
cores=$(nproc)
threads=$((cores > 2 ? cores - 1 : 1))
rest=$((cores > 5 ? cores - 4 : 1))
last=$((cores - 1))
echo "dataset: $n images ($((${#originals[@]})) photos, linked), $cores cores, batch $batch," \
  "$epochs epochs"

# Starts `heterodl serve` (after any prefix such as taskset) and echoes its
# address once it listens. The trainer's leader shuts it down at the end.
serve() {
  local port_file="$out/port"
  rm -f "$port_file"
  # Not on this function's stdout: $(serve ...) would wait for the server.
  "$@" --address 127.0.0.1:0 --port-file "$port_file" --idle-timeout 30s \
    >>"$out/serve.log" 2>&1 &
  echo $! >"$out/serve.pid"
  for _ in $(seq 600); do
    [[ -s "$port_file" ]] && { echo "127.0.0.1:$(cat "$port_file")"; return; }
    sleep 0.1
  done
  echo "heterodl serve did not start (see $out/serve.log)" >&2
  return 1
}

# heterodl's trainer (after any prefix) against `address`; metrics to NAME.jsonl.
# MEMORY_FORMAT=contiguous lays the model out NCHW (the default, auto, is
# channels-last on a GPU).
train() {
  local name=$1 address=$2 model=$3
  shift 3
  timeout "$run_timeout" "$@" "$bin/heterodl" train --data-servers "$address" --ranks 1 \
    --device "$device" --model "$model" --batch-size "$batch" --epochs "$epochs" \
    --memory-format "${MEMORY_FORMAT:-auto}" \
    --warmup-steps 10 --metrics-file "$out/$name.jsonl" >>"$out/train.log" 2>&1 ||
    echo "  $name failed (exit $?; see $out/train.log)"
  # The server leaves when told; never let one outlive its run.
  local pid
  pid=$(cat "$out/serve.pid")
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}

# The PyTorch trainer (after any prefix); its record to NAME.json.
torch_train() {
  local name=$1
  shift
  local prefix=()
  while [[ $1 != -- ]]; do prefix+=("$1"); shift; done
  shift
  timeout "$run_timeout" "${prefix[@]}" "$python" bench/gpu/torch_train.py --files "$files" \
    --images "$n" --batch-size "$batch" --epochs "$epochs" --device "$device" \
    --out "$out/$name.json" "$@" \
    >>"$out/torch.log" 2>&1 || echo "  $name failed (exit $?; see $out/torch.log)"
}

for model in ${MODELS-resnet18 resnet50}; do
  echo "$model: synthetic"
  address=$(serve "$bin/heterodl" serve --synthetic "$n" --pipeline 'center_crop(224)' --threads 2)
  train "$model-synthetic" "$address" "$model"
  address=$(serve "$bin/heterodl" serve --synthetic "$n" --pipeline 'center_crop(224)' --threads 2)
  MEMORY_FORMAT=contiguous train "$model-synthetic-contiguous" "$address" "$model"
  torch_train "$model-eager-synthetic" -- --model "$model" --feed synthetic

  echo "$model: heterodl, one server x $threads threads"
  address=$(serve "$bin/heterodl" serve --dataset "$dataset" --threads "$threads")
  train "$model-heterodl" "$address" "$model"
  if [[ -n $python_package ]]; then
    echo "$model: PyTorch trainer, heterodl's Python loader (the wheel), one server x $threads threads"
    address=$(serve "$bin/heterodl" serve --dataset "$dataset" --threads "$threads")
    torch_train "$model-python-heterodl" env PYTHONPATH="$python_package" -- --model "$model" \
      --feed heterodl --servers "$address"
  fi

  for decoder in pil tensor; do
    echo "$model: DataLoader, $threads workers, $decoder"
    torch_train "$model-dataloader-$decoder" -- --model "$model" --feed dataloader \
      --decoder "$decoder" --workers "$threads"
  done

  if ((cores >= 8)); then
    echo "$model: trainer on cores 0-3, heterodl on cores 4-$last"
    address=$(serve taskset -c "4-$last" "$bin/heterodl" serve --dataset "$dataset" \
      --threads "$rest")
    train "$model-heterodl-4core" "$address" "$model" taskset -c 0-3
    echo "$model: DataLoader on cores 0-3 (3 workers, torchvision.io)"
    torch_train "$model-dataloader-tensor-4core" taskset -c 0-3 -- --model "$model" \
      --feed dataloader --decoder tensor --workers 3
  fi
done
# The same ResNet-18 run with the server's decode threads at the trainer's
# priority (serve --worker-nice 0), to see what the default buys.
if [[ ${COMPARE_NICE:-1} == 1 && " ${MODELS-resnet18 resnet50} " == *" resnet18 "* ]]; then
  echo "resnet18: heterodl, decode threads not niced"
  address=$(serve "$bin/heterodl" serve --dataset "$dataset" --threads "$threads" --worker-nice 0)
  train "resnet18-heterodl-nice0" "$address" resnet18
fi

# The workloads beyond classification (bench/gpu/workloads.py): heterodl's
# Python loader against a DataLoader doing the same recipe with torchvision,
# on the same cores, then the trainer on cores 0-3 with heterodl on the
# others against the DataLoader on the 4 cores. WORKLOADS="" skips them.
workload_run() {
  local name=$1
  shift
  local prefix=()
  while [[ $1 != -- ]]; do prefix+=("$1"); shift; done
  shift
  timeout "$run_timeout" "${prefix[@]}" "$python" bench/gpu/workloads.py --device "$device" \
    --epochs "${WORKLOAD_EPOCHS:-2}" --max-steps "${WORKLOAD_MAX_STEPS:-30}" \
    --out "$out/$name.json" "$@" >>"$out/workloads.log" 2>&1 ||
    echo "  $name failed (exit $?; see $out/workloads.log)"
}
stop_server() {
  local pid
  pid=$(cat "$out/serve.pid")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}
workloads=${WORKLOADS-segmentation detection dino}
if [[ -n $workloads && -n $python_package ]]; then
  for workload in $workloads; do
    case $workload in
      segmentation)
        served="$out/segmentation"; data="$served"; wbatch=${SEG_BATCH:-8}
        [[ -d $served ]] || "$bin/heterodl" dataset sample "$served" --task segmentation \
          --sample-size 1024x2048 --images "${SEG_IMAGES:-320}" --source-photos "$photos" \
          >>"$out/workloads.log" 2>&1 ;;
      detection)
        served="$out/detection/annotations.json"; data="$served"; wbatch=${DET_BATCH:-8}
        [[ -d $out/detection ]] || "$bin/heterodl" dataset sample "$out/detection" \
          --task detection --sample-size 480x640 --images "${DET_IMAGES:-640}" \
          --source-photos "$photos" >>"$out/workloads.log" 2>&1 ;;
      dino)
        served="$dataset"; data="$files"; wbatch=${DINO_BATCH:-64} ;;
    esac
    echo "$workload: heterodl's Python loader, one server x $threads threads"
    address=$(serve "$bin/heterodl" serve --dataset "$served" --threads "$threads")
    workload_run "$workload-heterodl" env PYTHONPATH="$python_package" -- --workload "$workload" \
      --feed heterodl --servers "$address" --batch-size "$wbatch"
    stop_server
    # The DINO peer imports the example's loss, whose module imports heterodl.
    echo "$workload: DataLoader, $threads workers, torchvision.io + v2"
    workload_run "$workload-dataloader" env PYTHONPATH="$python_package" -- \
      --workload "$workload" --feed dataloader --data "$data" --workers "$threads" \
      --batch-size "$wbatch"
    if ((cores >= 8)); then
      echo "$workload: trainer on cores 0-3, heterodl on cores 4-$last"
      address=$(serve taskset -c "4-$last" "$bin/heterodl" serve --dataset "$served" \
        --threads "$rest")
      workload_run "$workload-heterodl-4core" taskset -c 0-3 env PYTHONPATH="$python_package" \
        -- --workload "$workload" --feed heterodl --servers "$address" --batch-size "$wbatch"
      stop_server
      echo "$workload: DataLoader on cores 0-3 (3 workers)"
      workload_run "$workload-dataloader-4core" taskset -c 0-3 env PYTHONPATH="$python_package" \
        -- --workload "$workload" --feed dataloader --data "$data" --workers 3 \
        --batch-size "$wbatch"
    fi
  done
fi
THREADS=$threads REST=$rest BATCH=$batch MODELS="${MODELS-resnet18 resnet50}" \
  WORKLOADS="$workloads" "$python" bench/gpu/table.py "$out"
