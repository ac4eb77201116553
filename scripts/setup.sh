#!/usr/bin/env bash
# Installs what heterodl needs on Debian bookworm and builds it into build/.
# Idempotent: installs only what is missing, rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
# The venvs are the installs: pip's cache would hold every wheel a second
# time (torch's CUDA libraries are gigabytes), on a CI disk that is finite.
export PIP_NO_CACHE_DIR=1

# Pinned: its C++ ABI matches Debian's libraries, and it is the torch of the
# reference GPU machine (2.11.0+cu130).
TORCH_VERSION=2.11.0
TORCHVISION_VERSION=0.26.0

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config python3 python3-venv python3-dev
  clang libclang-rt-14-dev clang-format clang-tidy
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libopencv-dev libjpeg62-turbo-dev libpng-dev libdeflate-dev libwebp-dev libgtest-dev libarchive-dev libdlpack-dev
  libgloo-dev mate-backgrounds gnuplot-nox procps iproute2
  libboost-dev nlohmann-json3-dev prometheus ccache libcurl4-openssl-dev
)

bash scripts/apt_install.sh setup "${APT_PACKAGES[@]}"

# The project's own virtual environment: LibTorch comes from PyPI's torch
# wheel (Debian's Python refuses global pip installs). Kept outside the clone
# (scripts/cached_venv.sh), keyed by what it installs.
source scripts/cached_venv.sh
link_venv .venv "torch==${TORCH_VERSION}" "torchvision==${TORCHVISION_VERSION}" numpy pillow \
  pyyaml "sagemaker>=2.230,<3" "kubernetes-validate>=1.30" "lightning>=2.4,<3" "moto[server]>=5,<6" tfrecord
use_ccache
if ! .venv/bin/python -c "import torch, torchvision, sys; sys.exit(torch.__version__.split('+')[0] != '${TORCH_VERSION}')" 2>/dev/null; then
  echo "setup: installing torch ${TORCH_VERSION} into .venv"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q "torch==${TORCH_VERSION}" "torchvision==${TORCHVISION_VERSION}" numpy pillow
fi
# What the examples' tests need: PyYAML and kubernetes-validate (the
# Kubernetes manifests, against the Kubernetes API's own schemas), the
# SageMaker Python SDK v2 (the training-job request, built offline); and
# PyTorch Lightning, whose Trainer checkpoints and resumes the Python loader
# in tests/python/lightning_test.py.
if ! SAGEMAKER_SUPPRESS_V2_WARNING=1 .venv/bin/python -c "import yaml, sagemaker, kubernetes_validate" 2>/dev/null; then
  echo "setup: installing pyyaml, kubernetes-validate and the SageMaker SDK into .venv"
  .venv/bin/pip install -q pyyaml "sagemaker>=2.230,<3" "kubernetes-validate>=1.30"
fi
if ! .venv/bin/python -c "import lightning" 2>/dev/null; then
  echo "setup: installing PyTorch Lightning into .venv"
  .venv/bin/pip install -q "lightning>=2.4,<3"
fi
# moto's server: an S3 endpoint (with IAM, STS and signature checks) the
# object-storage tests start on loopback; the tfrecord package writes the
# TFRecord files they read (TensorFlow's format, without TensorFlow).
if ! .venv/bin/python -c "import moto.server, flask_cors, tfrecord, crc32c" 2>/dev/null; then
  echo "setup: installing moto's S3 server and the tfrecord package into .venv"
  .venv/bin/pip install -q "moto[server]>=5,<6" tfrecord
fi

# The wheel's CMake config looks for the CUDA toolkit to describe its CUDA
# libraries; Debian has none, /usr/local/cuda is where NVIDIA's installers put it.
if [[ -d /usr/local/cuda/bin ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

cmake --preset default >/dev/null
cmake --build --preset default -- -j"$(nproc)"
