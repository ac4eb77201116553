#!/usr/bin/env bash
# Installs what the system-level peers of `heterodl bench feed --peers` need
# and the project's own .venv lacks: TensorFlow (CPU) in .venv-peers. Not run
# by CI; `bench feed --peers` runs it on demand.
set -euo pipefail
cd "$(dirname "$0")/../.."
# The venvs are the installs: pip's cache would hold every wheel a second
# time (torch's CUDA libraries are gigabytes), on a CI disk that is finite.
export PIP_NO_CACHE_DIR=1
if [[ ! -x .venv-peers/bin/python ]]; then
  python3 -m venv .venv-peers
fi
if ! .venv-peers/bin/python -c "import tensorflow" 2>/dev/null; then
  echo "peers: installing tensorflow-cpu into .venv-peers"
  .venv-peers/bin/pip install -q --upgrade pip
  .venv-peers/bin/pip install -q "tensorflow-cpu>=2.15,<3"
fi
