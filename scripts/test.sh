#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (what .ci/run calls): the
# style check (clang-format and clang-tidy over the whole tree), the
# default build's tests (unit, e2e, Python, the wheel in fresh venvs,
# examples, the namespace cluster, the fuzzer), then the torch-free tests
# again under AddressSanitizer and UndefinedBehaviorSanitizer (the asan
# preset).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/check_style.sh
bash scripts/build_wheel.sh
bash tests/python/make_wheel_venvs.sh
ctest --preset default
cmake --preset asan >/dev/null
cmake --build --preset asan -- -j"$(nproc)"
ctest --preset asan
