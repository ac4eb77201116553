#!/usr/bin/env bash
# Gives the libraries a repaired wheel bundles (heterodl.libs/: gRPC,
# protobuf, Abseil, OpenSSL, c-ares, re2, upb) symbol names of their own,
# in their definitions and in every reference to them (theirs and the
# extension's), then repacks the wheel with its RECORD recomputed:
#
#   scripts/isolate_wheel_symbols.sh REPAIRED.whl OUT_DIR
#
# Why: a process that imported TensorFlow first holds TensorFlow's own
# protobuf, Abseil, gRPC and BoringSSL, exported by libtensorflow_framework.so
# into the global scope (it is loaded RTLD_GLOBAL). The dynamic linker looks
# there first, so the bundled libraries' references bound to TensorFlow's
# definitions (another version, other layouts) and the first RPC crashed.
# Renamed, no name of ours can match anything another library exports.
# Linking the dependencies statically and hidden would do the same, but
# Debian's archives are built as PIE (local-exec TLS), which a shared object
# cannot hold; RTLD_DEEPBIND would too, but would also bind malloc past an
# LD_PRELOADed allocator (tcmalloc, common with TensorFlow) and cannot run
# under the sanitizers. Needs patchelf >= 0.18, `wheel` and binutils' nm on
# PATH.
set -euo pipefail
wheel_file=$1
out_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

wheel unpack -d "$work" "$wheel_file" >/dev/null
root=$(echo "$work"/heterodl-*)
bundled=("$root"/heterodl.libs/*.so*)
# Every dynamic symbol a bundled library defines, version suffix dropped
# (a rename keeps the version), less the linker's own markers.
for library in "${bundled[@]}"; do
  nm -D --defined-only "$library" | awk 'NF == 3 { print $3 }'
done | sed 's/@.*//' | grep -v -x -E '_init|_fini|_edata|_end|__bss_start' | sort -u |
  awk '{ print $1, "heterodl_" $1 }' >"$work/renames"
for library in "${bundled[@]}" "$root"/heterodl/_heterodl*.so; do
  patchelf --rename-dynamic-symbols "$work/renames" "$library"
done
# A symbol that kept its name would be one the extension takes from outside
# the wheel: only the C and C++ runtimes and CPython may provide those.
leaked=$(nm -D --undefined-only "$root"/heterodl/_heterodl*.so "${bundled[@]}" |
  awk 'NF == 2 { print $2 }' | sed 's/@.*//' | sort -u |
  comm -12 - <(cut -d' ' -f1 "$work/renames") || true)
if [[ -n $leaked ]]; then
  echo "isolate_wheel_symbols: references left unrenamed: $leaked" >&2
  exit 1
fi
mkdir -p "$out_dir"
wheel pack -d "$out_dir" "$root" >/dev/null
echo "isolate_wheel_symbols: renamed $(wc -l <"$work/renames") symbols in ${#bundled[@]} libraries" >&2
