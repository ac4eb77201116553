#!/usr/bin/env bash
# Makes .venv-pillow-simd: Pillow-SIMD (built from source, as its README
# installs it, with AVX2) in a venv of its own that sees the project's .venv
# for torch and torchvision, so `heterodl bench augment` can run its PIL peer
# on Pillow-SIMD beside stock Pillow. Not run by CI; run it by hand before a
# benchmark (bench augment names it when the venv is missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PIP_NO_CACHE_DIR=1
if [[ ! -x .venv/bin/python ]]; then
  echo "setup_pillow_simd: run scripts/setup.sh first (.venv holds torch and torchvision)" >&2
  exit 1
fi
# Pillow-SIMD has no wheels: it compiles against the system's codecs.
missing=()
for package in python3-dev libjpeg-dev zlib1g-dev libpng-dev libwebp-dev; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if ((${#missing[@]})); then
  apt-get install -y -q "${missing[@]}"
fi
if [[ ! -x .venv-pillow-simd/bin/python ]]; then
  python3 -m venv .venv-pillow-simd
fi
# The venv's own site-packages come before a .pth's folders, so its PIL
# (Pillow-SIMD) shadows the Pillow that .venv holds beside torchvision.
project_site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_path('purelib'))")
own_site=$(.venv-pillow-simd/bin/python -c "import sysconfig; print(sysconfig.get_path('purelib'))")
echo "$project_site" > "$own_site/project_venv.pth"
if ! .venv-pillow-simd/bin/python -c "import PIL, sys; sys.exit('post' not in PIL.__version__)" \
    2>/dev/null; then
  echo "setup_pillow_simd: building pillow-simd (a minute or two)"
  CC="cc -mavx2" .venv-pillow-simd/bin/pip install -q --no-binary pillow-simd pillow-simd
fi
.venv-pillow-simd/bin/python -c "
import PIL, torchvision
assert 'post' in PIL.__version__, PIL.__file__
print('setup_pillow_simd: Pillow-SIMD', PIL.__version__, 'with torchvision', torchvision.__version__)"
