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
# The checker is checked first: gp_tsan_planted (tests/transport/planted_race.cc) plants two
# races in project-style code reached from gRPC's reactions (a raw call's handler, a reactor's
# OnReadDone), and TSan must report both under the same suppressions; if a suppression hid
# them, it would hide the project's own races too, and tsan.sh fails.
# Exit status: 0 clean (and both planted races reported), 1 a report, a failed test, or a
# planted race not reported.
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
cmake --build "$BUILD" -j "${JOBS:-2}" --target gp_server_tests gp_tsan_planted

supp="suppressions=$PWD/scripts/tsan.supp"
export OMP_NUM_THREADS=1
# Without address-space randomisation: TSan's shadow mapping fails on some kernels with it.
norandom=()
if setarch "$(uname -m)" -R true 2>/dev/null; then norandom=(setarch "$(uname -m)" -R); fi

# The check of the checker: both planted races reported (exit 66: TSan's, with reports).
planted_log="$BUILD/tsan-planted.log"
set +e
TSAN_OPTIONS="halt_on_error=0 history_size=7 exitcode=66 $supp ${TSAN_OPTIONS:-}" \
  "${norandom[@]}" "$BUILD/tests/transport/gp_tsan_planted" >"$planted_log" 2>&1
planted_rc=$?
set -e
missing=()
# A report names the function in one of its two stacks (the program prints neither name).
for f in PlantedHandlerRace PlantedReactionRace; do
  grep -q " $f[ (]" "$planted_log" || missing+=("$f")
done
if [[ $planted_rc -ne 66 || ${#missing[@]} -gt 0 ]] || ! grep -q "calls ok" "$planted_log"; then
  echo "tsan.sh: FAILED: the planted races were not all reported (exit $planted_rc; missing:" \
       "${missing[*]:-none}); a suppression hides project code, or the program failed:" >&2
  tail -30 "$planted_log" >&2
  exit 1
fi
echo "tsan.sh: planted races reported: $(grep -c '^SUMMARY: ThreadSanitizer' "$planted_log") reports" \
     "naming PlantedHandlerRace and PlantedReactionRace"

export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 history_size=7 exitcode=66 $supp ${TSAN_OPTIONS:-}"
log="$BUILD/tsan.log"
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
