#!/usr/bin/env bash
# Packs what bench/gpu/run.sh needs on a GPU machine that has no package
# registry: heterodl and heterodl-trainer built here against the same torch
# (2.11.0+cu130), the Debian libraries they link (gRPC, protobuf, Abseil,
# OpenCV, libjpeg-turbo, libarchive and their own dependencies; never torch,
# CUDA or the C library, which the GPU machine has), the Python package's
# wheel (scripts/build_wheel.sh: run.sh pip-installs it there) and the sample
# dataset.
#
#   bash bench/gpu/make_bundle.sh   # -> bench/gpu/bundle.tar.xz (git-ignored)
#
# OpenCV's codecs pull in GDAL, x265 and friends: the libraries are ~190 MB,
# ~53 MB as xz -9e; with the wheel (7 MB) and 9 photos the bundle is 63 MB,
# which with the tracked files just fits what a device run may carry
# (64 MiB): carry bench/gpu/bundle.tar.xz alone, not dist/ as well.
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ -x build/heterodl && -x build/heterodl-trainer ]] || bash scripts/setup.sh
bundle=bench/gpu/bundle
rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib"
cp build/heterodl build/heterodl-main build/heterodl-trainer "$bundle/bin/"
strip "$bundle/bin/"*
# Libraries of the two binaries, minus torch/CUDA (from the GPU machine's
# wheel) and glibc's own (from its system).
ldd build/heterodl-main build/heterodl-trainer | awk '/=> \// {print $1, $3}' | sort -u |
  while read -r name path; do
    case "$name" in
      libtorch*|libc10*|libcuda*|libcudart*|libnv*|libnccl*|libcublas*|libcufft*|libcurand*|\
      libcusparse*|libcusolver*|libcudnn*|libcupti*|libgomp*|libc.so*|libm.so*|libdl.so*|libpthread.so*|\
      librt.so*|libutil.so*|ld-linux*|libshm*|libcaffe2*) ;;
      *) cp -L "$path" "$bundle/lib/$name" ;;
    esac
  done
bash scripts/build_wheel.sh >/dev/null
cp dist/heterodl-*manylinux*.whl "$bundle/"
# Whole photos, from which run.sh writes its samples there (the
# classification photos, the workloads' street-sized segmentation images
# and COCO-sized detection ones): the smaller mate-backgrounds photos, 3 MB.
mkdir -p "$bundle/photos"
find /usr/share/backgrounds/mate -name '*.jpg' -size -720k -exec cp {} "$bundle/photos/" \;
# xz's strongest: the bundle and the tracked files must fit a device run's
# 64 MiB.
tar -cf - -C bench/gpu bundle | xz -9e -T"$(nproc)" >bench/gpu/bundle.tar.xz
rm -rf "$bundle"
echo "bundle: $(du -h bench/gpu/bundle.tar.xz | cut -f1) in bench/gpu/bundle.tar.xz"
