#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (what .ci/run calls): the
# style check (clang-format and clang-tidy over the whole tree), the
# default build's tests (unit, e2e, Python, the wheel in fresh venvs and
# beside TensorFlow, JAX across processes, examples, the namespace cluster,
# the fuzzer), then the torch-free tests
# again under AddressSanitizer and UndefinedBehaviorSanitizer (the asan
# preset). Each phase's time is printed at the end.
#
# Caches outside the clone (scripts/cached_venv.sh: the venvs, ccache, and
# clang-tidy's verdicts on unchanged units) make a second run on the same
# machine much faster than the first; a bare machine builds them once.
set -euo pipefail
cd "$(dirname "$0")/.."

phases=()
suite_start=$SECONDS
report() {
  local status=$?
  echo "scripts/test.sh phases (seconds):"
  local line
  for line in "${phases[@]}"; do
    echo "  $line"
  done
  echo "  total $((SECONDS - suite_start))s$([[ $status -eq 0 ]] || echo ", FAILED (exit $status)")"
}
trap report EXIT
# phase NAME COMMAND...: runs COMMAND, noting how long it took.
phase() {
  local name=$1
  shift
  local start=$SECONDS
  "$@"
  phases+=("$(printf '%-34s %5ds' "$name" $((SECONDS - start)))")
}

phase "setup (install, build)" bash scripts/setup.sh
phase "style (clang-format, clang-tidy)" bash scripts/check_style.sh
phase "wheel" bash scripts/build_wheel.sh
phase "wheel venvs" bash tests/python/make_wheel_venvs.sh
phase "framework venvs" bash tests/python/make_framework_venvs.sh
phase "tests (default preset)" ctest --preset default
source scripts/cached_venv.sh
use_ccache
phase "asan build" bash -c 'cmake --preset asan >/dev/null && cmake --build --preset asan -- -j"$(nproc)"'
phase "tests (asan preset)" ctest --preset asan
