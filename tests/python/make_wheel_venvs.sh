#!/usr/bin/env bash
# The virtualenvs tests/python/wheel_test.py installs the built wheel into
# (scripts/test.sh runs this; idempotent). None sees the build tree:
#   .venv-wheel/torch-project  the project's torch 2.11.0, shared with .venv
#                              through a .pth file (no second download)
#   .venv-wheel/examples       the same, for tests/examples (each test owns
#                              the venvs it installs the wheel into)
#   .venv-wheel/torch-2.6      torch 2.6.0 from PyPI: another release, another
#                              C++ ABI (pre-C++11) and DLPack implementation
#   .venv-wheel/numpy          NumPy only, no torch
#   .venv-wheel/jax            JAX (CPU) and NumPy, no torch
#   .venv-wheel/py3.12, py3.13 bare venvs of newer CPythons, where this machine
#                              has them (pyenv's): the abi3 wheel built with
#                              3.11 must import there unchanged
set -euo pipefail
cd "$(dirname "$0")/../.."
# The venvs are the installs: pip's cache would hold every wheel a second
# time (torch's CUDA libraries are gigabytes), on a CI disk that is finite.
export PIP_NO_CACHE_DIR=1
OTHER_TORCH=2.6.0
root=.venv-wheel
# Outside the clone, keyed by what the venvs hold (scripts/cached_venv.sh):
# a fresh clone does not download torch 2.6 and JAX again.
source scripts/cached_venv.sh
link_cached_dir "$root" "torch==$OTHER_TORCH" jax numpy "$(sha256sum <"$0")" >/dev/null

fresh() {  # fresh NAME: a venv with an up-to-date pip
  [[ -x $root/$1/bin/python ]] && return 0
  python3 -m venv "$root/$1"
  "$root/$1/bin/pip" install -q --upgrade pip
}

project_site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
for name in torch-project examples; do
  fresh "$name"
  own_site=$("$root/$name/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  echo "$project_site" >"$own_site/project_torch.pth"
done

# torch 2.6 with its CUDA libraries takes about 5.5 GB. On a disk with less
# room than that the venv is not attempted: a full disk would fail every test
# after it. wheel_test.py reports the skip with the reason written here.
skipped=$root/torch-2.6.skipped
rm -f "$skipped"
if ! "$root/torch-2.6/bin/python" -c "import torch, sys; sys.exit(not torch.__version__.startswith('${OTHER_TORCH}'))" 2>/dev/null; then
  free_gib=$(df -Pk "$root" | awk 'NR == 2 { print int($4 / 1048576) }')
  if (( free_gib < 8 )); then
    echo "only ${free_gib} GiB free here, torch ${OTHER_TORCH} needs about 6 GiB with room to spare" >"$skipped"
    echo "wheel venvs: NOT installing torch ${OTHER_TORCH}: $(cat "$skipped")" >&2
    rm -rf "$root/torch-2.6"
  else
    fresh torch-2.6
    echo "wheel venvs: installing torch ${OTHER_TORCH} into $root/torch-2.6"
    "$root/torch-2.6/bin/pip" install -q "torch==${OTHER_TORCH}" numpy
  fi
fi

fresh numpy
if ! "$root/numpy/bin/python" -c "import numpy" 2>/dev/null; then
  "$root/numpy/bin/pip" install -q numpy
fi

fresh jax
if ! "$root/jax/bin/python" -c "import jax" 2>/dev/null; then
  echo "wheel venvs: installing jax (CPU) into $root/jax"
  "$root/jax/bin/pip" install -q "jax[cpu]"
fi

for version in 3.12 3.13; do
  [[ -x $root/py$version/bin/python ]] && continue
  for interpreter in "$HOME"/.pyenv/versions/"$version".*/bin/"python$version" \
      "/usr/bin/python$version" "/usr/local/bin/python$version"; do
    # A pyenv shim on PATH can name a version it will not run: try each.
    if [[ -x $interpreter ]] && "$interpreter" -c "pass" 2>/dev/null; then
      "$interpreter" -m venv "$root/py$version"
      break
    fi
  done
done
