#!/usr/bin/env bash
# Fuzzes the code that reads bytes from the network or a file: raw push streams against a
# real ParameterStore, every codec's Decode and LoadState, the unary requests, the YAML
# config, the HTTP port's parser, router and endpoint (fuzz/*.cc says what each target covers). Builds build-fuzz with clang-14 and
# -fsanitize=fuzzer,address,undefined (-fno-sanitize-recover=all), writes each target's seed
# corpus with the project's own encoders (valid pushes, payloads and requests for every
# codec; configs/*.yaml for the config), then runs every target for its share of the time.
#
#   scripts/fuzz.sh                   # 60 s in total, split evenly across the targets
#   scripts/fuzz.sh --seconds 600     # longer
#   scripts/fuzz.sh --target push     # one target (decode, push, messages, config, http)
#
# Exit status: 0 clean; 1 a crash, leak, timeout (> 10 s per input), out-of-memory
# (> 2 GiB) or undefined behaviour, with the artifact kept in build-fuzz/artifacts/ and the
# command that reproduces it printed; 77 when clang-14 is missing (scripts/setup.sh installs
# it). The corpus in build-fuzz/corpus/ grows across runs; delete it to start over.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60
targets=(decode push messages config http)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --target) targets=("$2"); shift 2 ;;
    *) echo "fuzz.sh: unknown argument '$1' (expected --seconds N, --target NAME)" >&2; exit 2 ;;
  esac
done

if ! command -v clang++-14 >/dev/null 2>&1 || ! command -v clang-14 >/dev/null 2>&1; then
  echo "########################################################################" >&2
  echo "fuzz.sh: SKIPPED: clang-14 / clang++-14 not found (bash scripts/setup.sh)" >&2
  echo "########################################################################" >&2
  exit 77
fi

BUILD=build-fuzz
mkdir -p "$BUILD"
launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
CC=clang-14 CXX=clang++-14 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGP_FUZZ=ON -DGP_CUDA=OFF -DGP_BUILD_TESTS=OFF -DGP_BUILD_BENCH=OFF "${launcher[@]}" >"$BUILD/configure.log" \
  || { cat "$BUILD/configure.log" >&2; exit 1; }
build_targets=()
for t in "${targets[@]}"; do build_targets+=(--target "gradpress-fuzz-$t"); done
cmake --build "$BUILD" -j "${JOBS:-2}" "${build_targets[@]}"

mkdir -p "$BUILD/artifacts" "$BUILD/logs"
per_target=$(( (seconds + ${#targets[@]} - 1) / ${#targets[@]} ))
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:symbolize=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
export OMP_NUM_THREADS=1

failed=()
for t in "${targets[@]}"; do
  bin="$BUILD/fuzz/gradpress-fuzz-$t"
  seeds="$BUILD/seeds/$t"
  corpus="$BUILD/corpus/$t"
  rm -rf "$seeds"
  mkdir -p "$seeds" "$corpus"
  if [[ "$t" == config ]]; then cp configs/*.yaml "$seeds/"; fi
  "$bin" --write-seeds="$seeds" 2>"$BUILD/logs/$t.seeds.log" \
    || { cat "$BUILD/logs/$t.seeds.log" >&2; failed+=("$t (seed writer)"); continue; }
  case "$t" in
    push) max_len=32768 ;;
    decode) max_len=16384 ;;
    *) max_len=8192 ;;
  esac
  log="$BUILD/logs/$t.log"
  echo "fuzz.sh: $t for ${per_target} s ($(ls "$seeds" | wc -l) seeds, $(ls "$corpus" | wc -l) in corpus)"
  before=$(ls "$BUILD/artifacts" | wc -l)
  if "$bin" -max_total_time="$per_target" -timeout=10 -rss_limit_mb=2048 -detect_leaks=1 \
       -max_len="$max_len" -print_final_stats=1 -artifact_prefix="$BUILD/artifacts/$t-" \
       "$corpus" "$seeds" >"$log" 2>&1; then
    grep -E "^stat::(number_of_executed_units|peak_rss_mb)|cov: " "$log" | tail -3 | sed 's/^/  /'
  else
    failed+=("$t")
    echo "fuzz.sh: $t FAILED; the end of $log:" >&2
    grep -v "^#[0-9]" "$log" | sed -n '/runtime error\|ERROR: \|oracle failed\|terminate called/,$p' |
      grep -v "in fuzzer::\|in main \|in __libc_start\|in _start" | head -40 >&2
    ls -t "$BUILD/artifacts" | head -n $(( $(ls "$BUILD/artifacts" | wc -l) - before )) |
      while read -r a; do
        echo "fuzz.sh: reproduce with: $bin $BUILD/artifacts/$a" >&2
      done
  fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz.sh: FAILED: ${failed[*]} (artifacts in $BUILD/artifacts)" >&2
  exit 1
fi
echo "fuzz.sh: ${targets[*]}: clean after ${per_target} s each"
