#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (what .ci/run calls).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ctest --preset default
