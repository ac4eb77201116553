#!/usr/bin/env bash
# The style the repository declares, enforced (scripts/test.sh runs this):
# every tracked C++ file as clang-format (.clang-format) writes it, and no
# clang-tidy (.clang-tidy) warning in any translation unit of the build,
# headers included. Exit 1, naming each violation, otherwise 0.
#
#   bash scripts/check_style.sh          # after scripts/setup.sh's build
#   bash scripts/check_style.sh --fix    # rewrite what the tools can fix
#
# Needs build/compile_commands.json (the default preset writes it).
set -euo pipefail
cd "$(dirname "$0")/.."
fix=false
[[ "${1:-}" == "--fix" ]] && fix=true

mapfile -t sources < <(git ls-files '*.cc' '*.h')
if $fix; then
  clang-format -i "${sources[@]}"
elif ! clang-format --dry-run --Werror "${sources[@]}"; then
  echo "check_style: clang-format would change the files above (bash scripts/check_style.sh --fix)" >&2
  exit 1
fi

if [[ ! -f build/compile_commands.json ]]; then
  echo "check_style: build/compile_commands.json is missing: run scripts/setup.sh first" >&2
  exit 1
fi
# Our translation units only (not protoc's generated ones under build/).
# Through scripts/clang_tidy_cached.py: a unit whose preprocessed text,
# flags, clang-tidy and .clang-tidy were seen clean before is not analysed
# again (the cache lives outside the clone; a bare machine analyses all).
tidy=(run-clang-tidy -p build -j "$(nproc)" -quiet
      -clang-tidy-binary "$PWD/scripts/clang_tidy_cached.py"
      "$PWD/(augment|src|launcher|bench|tests)/")
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if $fix; then
  "${tidy[@]}" -fix >"$log" 2>&1 || true
  clang-format -i "${sources[@]}"
fi
"${tidy[@]}" >"$log" 2>&1 || true
# run-clang-tidy exits 0 on warnings: they are counted here instead.
warnings=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E '^/.*: (warning|error): ' | sort -u || true)
if [[ -n "$warnings" ]]; then
  echo "$warnings"
  echo "check_style: $(echo "$warnings" | wc -l) clang-tidy finding(s) above" >&2
  exit 1
fi
echo "check_style: clang-format and clang-tidy clean over ${#sources[@]} files"
