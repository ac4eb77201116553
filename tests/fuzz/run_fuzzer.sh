#!/usr/bin/env bash
# Builds the libFuzzer target with clang + ASan + UBSan (the `fuzz` preset)
# and runs it on a seed corpus of real images: a fixed seed and number of
# runs, so a CI result is reproducible, with SECONDS as a cap. Any crash,
# sanitizer report or leak fails the test. Usage: run_fuzzer.sh SECONDS [RUNS]
# (RUNS=0: run for SECONDS with a random seed, for exploring by hand).
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_TO_RUN=${1:-60}
RUNS=${2:-40000}
if [[ "$RUNS" -gt 0 ]]; then LIMITS=(-seed=1 -runs="$RUNS"); else LIMITS=(); fi
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz --target pipeline_fuzzer -- -j"$(nproc)" >/dev/null
CORPUS=build-fuzz/corpus
mkdir -p "$CORPUS"
# Seeds: sample-dataset images of every format the decoders take (baseline,
# grayscale and progressive JPEG, PNG, WebP; prefixed with the "image" byte)
# that fit -max_len, and specs.
if [[ -z "$(ls -A "$CORPUS")" ]]; then
  SEEDS=$(mktemp -d)
  ./build/heterodl dataset sample "$SEEDS/images" --images 40 --formats mixed >/dev/null 2>&1 || true
  i=0
  for f in "$SEEDS"/images/*/*.*; do
    [[ -f "$f" && $(stat -c %s "$f") -lt 262000 ]] || continue
    { printf '\x00'; cat "$f"; } > "$CORPUS/image$i"; i=$((i + 1))
  done
  printf '\x01random_resized_crop(224,scale=0.08:1)|hflip(0.5)' > "$CORPUS/spec0"
  printf '\x01decode(exact)|resize(256)|center_crop(224)|color_jitter(0.4,0.4,0.4,0.1)' > "$CORPUS/spec1"
  rm -rf "$SEEDS"
fi
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
./build-fuzz/pipeline_fuzzer "$CORPUS" "${LIMITS[@]}" -max_total_time="$SECONDS_TO_RUN" \
  -rss_limit_mb=2048 -max_len=262144 -timeout=10 -print_final_stats=1 \
  -artifact_prefix=build-fuzz/ 2>&1 | tail -25
