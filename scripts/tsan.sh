#!/usr/bin/env bash
# ThreadSanitizer run of the server tests: builds build-tsan (gcc, -DGP_SANITIZE=thread) with
# only gp_server_tests, and runs its [concurrency] tests (tests/server/concurrency_test.cc:
# 8 workers with PushPull, Push + Pull, Stats, Heartbeat, a leaver and checkpoints at once,
# sync none, sync topk+qsgd with error feedback both ways, async), failing on any data race,
# lock-order inversion or other report.
#
#   scripts/tsan.sh                    # the [concurrency] tests
#   scripts/tsan.sh '[server]'         # any Catch2 test spec
#
# Not by default: store_test.cc's tests call Catch2's CHECK from worker threads, which
# races inside Catch2 (it is not thread-safe) and is reported as such.
#
# gRPC, protobuf, abseil and LibTorch are not instrumented; scripts/tsan.supp may suppress
# reports whose frames lie inside those libraries only (each line says why), never gradpress
# code. Torch and OpenMP run one thread (OMP_NUM_THREADS=1, and the tests set torch's).
# Exit status: 0 clean, 1 a report or a failed test.
set -euo pipefail
cd "$(dirname "$0")/.."

spec=${1:-'[concurrency]'}
BUILD=build-tsan
mkdir -p "$BUILD"
launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
CC=gcc CXX=g++ cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGP_SANITIZE=thread \
  -DGP_BUILD_BENCH=OFF -DGP_CUDA=OFF "${launcher[@]}" >"$BUILD/configure.log" \
  || { cat "$BUILD/configure.log" >&2; exit 1; }
cmake --build "$BUILD" -j "${JOBS:-2}" --target gp_server_tests

export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 history_size=7 exitcode=66 suppressions=$PWD/scripts/tsan.supp ${TSAN_OPTIONS:-}"
export OMP_NUM_THREADS=1
log="$BUILD/tsan.log"
# Without address-space randomisation: TSan's shadow mapping fails on some kernels with it.
norandom=()
if setarch "$(uname -m)" -R true 2>/dev/null; then norandom=(setarch "$(uname -m)" -R); fi
set +e
"${norandom[@]}" "$BUILD/tests/server/gp_server_tests" "$spec" --durations yes 2>&1 | tee "$log" |
  grep -E "^(All tests passed|test cases|WARNING: ThreadSanitizer|SUMMARY: ThreadSanitizer)|[0-9.]+ s: "
rc=${PIPESTATUS[0]}
set -e
if [[ $rc -ne 0 ]] || grep -q "ThreadSanitizer" "$log"; then
  echo "tsan.sh: FAILED (exit $rc); the first report in $log:" >&2
  grep -n -m1 -A60 "WARNING: ThreadSanitizer" "$log" >&2 || tail -40 "$log" >&2
  exit 1
fi
echo "tsan.sh: clean ($spec)"
