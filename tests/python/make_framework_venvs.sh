#!/usr/bin/env bash
# The virtualenvs the framework tests install the built wheel into
# (scripts/test.sh runs this; idempotent). Outside the clone, keyed by what
# they install (scripts/cached_venv.sh), so that a fresh clone on a machine
# that built them once downloads nothing:
#   .venv-frameworks/tensorflow   tensorflow-cpu (and its Keras), NumPy: the
#                                 wheel imported beside TensorFlow's own gRPC,
#                                 protobuf and Abseil; heterodl.tf; Keras fit
#   .venv-frameworks/huggingface  accelerate and transformers over the
#                                 project's torch (shared through a .pth file)
# A venv that does not fit the disk is not attempted: NAME.skipped says why,
# and its test reports the skip with that reason.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PIP_NO_CACHE_DIR=1
TENSORFLOW=2.21.0
ACCELERATE=1.15.0
TRANSFORMERS=5.24.0
root=.venv-frameworks
source scripts/cached_venv.sh
link_cached_dir "$root" "tensorflow-cpu==$TENSORFLOW" "accelerate==$ACCELERATE" \
  "transformers==$TRANSFORMERS" "$(sha256sum <"$0")" >/dev/null

fresh() {  # fresh NAME: a venv with an up-to-date pip
  [[ -x $root/$1/bin/python ]] && return 0
  python3 -m venv "$root/$1"
  "$root/$1/bin/pip" install -q --upgrade pip
}

# install NAME GIB CHECK PACKAGE...: PACKAGE... into venv NAME unless CHECK
# (Python) already passes there; skipped, saying why, with under GIB free.
install() {
  local name=$1 gib=$2 check=$3
  shift 3
  rm -f "$root/$name.skipped"
  if [[ -x $root/$name/bin/python ]] && "$root/$name/bin/python" -c "$check" 2>/dev/null; then
    return 0
  fi
  local free_gib
  free_gib=$(df -Pk "$(dirname "$(readlink -f "$root")")" | awk 'NR == 2 { print int($4 / 1048576) }')
  if (( free_gib < gib )); then
    echo "only ${free_gib} GiB free here, $name needs about $((gib / 2)) GiB with room to spare" \
      >"$root/$name.skipped"
    echo "framework venvs: NOT installing $name: $(cat "$root/$name.skipped")" >&2
    rm -rf "${root:?}/$name"
    return 0
  fi
  fresh "$name"
  echo "framework venvs: installing $* into $root/$name"
  "$root/$name/bin/pip" install -q "$@"
}

install tensorflow 4 "import tensorflow, sys; sys.exit(tensorflow.__version__ != '$TENSORFLOW')" \
  "tensorflow-cpu==$TENSORFLOW" numpy

fresh huggingface
project_site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
own_site=$("$root/huggingface/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$project_site" >"$own_site/project_torch.pth"
install huggingface 2 "import accelerate, transformers" "accelerate==$ACCELERATE" \
  "transformers==$TRANSFORMERS"
