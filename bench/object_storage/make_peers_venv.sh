#!/bin/bash
# The Python that peers_from_bucket.py runs the peers in: MosaicML Streaming
# and s3torchconnector beside the project venv's torch, torchvision, Pillow
# and boto3 (seen through a .pth file, so torch is not downloaded again),
# kept outside the clone.
#
#   bash bench/object_storage/make_peers_venv.sh   # prints the Python's path
set -euo pipefail
cd "$(dirname "$0")/../.."
target="${HETERODL_PEERS_VENV:-$HOME/.cache/heterodl-peers/streaming}"
if [ ! -x "$target/bin/python" ] || ! "$target/bin/python" -c "import streaming, s3torchconnector" 2>/dev/null; then
  [ -x .venv/bin/python ] || { echo "run scripts/setup.sh first (the project venv)" >&2; exit 1; }
  python3 -m venv "$target"
  .venv/bin/python -c 'import site; print(site.getsitepackages()[0])' \
    > "$("$target/bin/python" -c 'import site; print(site.getsitepackages()[0])')/heterodl-venv.pth"
  "$target/bin/pip" install -q "mosaicml-streaming>=0.13,<0.14" "s3torchconnector>=1.5,<2" >&2
fi
echo "$target/bin/python"
