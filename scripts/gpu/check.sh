#!/usr/bin/env bash
# Everything that needs a GPU, in one run on a machine with an NVIDIA GPU, from the root of a
# copied checkout, inside BUDGET_S seconds (default 450):
#
#   OUT=/tmp/gp-check bash scripts/gpu/check.sh                       # OUT: .gpu/check-out
#   OUT=/tmp/gp-check FULL=1 BUDGET_S=560 bash scripts/gpu/check.sh   # and training
#
# Prepare .gpu/ first, on a Debian machine: bash scripts/gpu/fetch_debs.sh (docs/gpu.md). Every stage
# logs to $OUT/<stage>.log and adds its exit code and wall time to $OUT/summary.txt (at the
# end the logs are packed into $OUT/logs.tar.gz beside summary.txt, bench.txt,
# bench_small.txt, medians.txt, profile.txt and trace.txt, for copying back a few files).
# A stage is skipped when too little of the budget is left, and a failure stops only the stages that
# need its output (each looks for the executable it runs, so a partial build still tests what
# built). Without a GPU (the rehearsal here) the tests and the bench exit 77 and are reported
# skipped.
#   probe   nvidia-smi, nvcc, torch and cmake versions
#   deps    dpkg -x of the debs the CUDA-only build needs (spdlog, fmt, yaml-cpp, catch2, zlib)
#   build   the CUDA-only tree (GP_CUDA_ONLY: codec libraries, CUDA codecs, tests, bench)
#   logic   gp_cuda_logic_tests
#   device  gp_cuda_device_tests, one process per codec tag (a kernel fault poisons the CUDA
#           context of its process); logs in $OUT/device_tests/<tag>.log
#   torch   scripts/gpu/torch_reference.py -> torch_reference.json
#   bench   gradpress-cuda-bench --torch-topk-us <torch.topk's> -> bench.txt (and bench.json
#           with BENCH_JSON=1: a second run)
#   small   method 5's codec at VGG11's largest and smallest device-path tensor sizes
#           -> bench_small.txt
#   profile the first of them under Nsight Systems where the machine has nsys, else under
#           the CUPTI trace (scripts/gpu/cupti_trace.cc): CUDA API calls, waits, kernel and
#           copy times -> profile.txt (skipped with neither)
#   full    only with FULL=1: the LibTorch build and training runs of docs/gpu.md
#           (build_and_test.sh; FULL_STAGES, BUILD_TARGETS, EPOCHS, TRAIN_CONFIGS,
#           VGG_CONFIGS, VGG_STEPS, VGG_WORKERS, SERVER_THREADS pass through), full/medians.txt,
#           key_codecs.log
#   trace   only with FULL=1: one more VGG11 method-5 run with one worker under the CUPTI
#           trace -> trace.txt
# Environment: OUT, BUDGET_S, JOBS (16), BUILD_DIR (build-gpu-cuda), NVCC, FULL, and STAGES
# (a comma-separated subset of the stages, in order; all by default).
# shellcheck disable=SC2317  # the stage_* functions are called indirectly, as "stage_$stage"
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
REPO=$PWD
OUT=${OUT:-$REPO/.gpu/check-out}
BUDGET_S=${BUDGET_S:-450}
JOBS=${JOBS:-16}
BUILD=${BUILD_DIR:-$REPO/build-gpu-cuda}
STAGES=${STAGES:-probe,deps,build,logic,torch,bench,small,profile,device,full,trace}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
ROOT=$REPO/.gpu/root  # the extracted Debian packages
LIBDIR=$ROOT/usr/lib/x86_64-linux-gnu
[[ -d /opt/torch/.venv/bin ]] && PATH=/opt/torch/.venv/bin:$PATH  # cmake 4, ninja, torch
PY=$(command -v python3 || echo python3)
DEVICE_TESTS=$BUILD/tests/compressors/cuda/gp_cuda_device_tests
BENCH=$BUILD/bench/cuda/gradpress-cuda-bench
TORCH_TOPK_US=""
FAILED=0
T0=$SECONDS
mkdir -p "$OUT/device_tests"
: >"$OUT/summary.txt"

left() { echo $((BUDGET_S - (SECONDS - T0))); }
# Seconds a stage may take: its cap, or what is left minus 5 s; 0 (skip) below its minimum.
budget() {
  local cap=$1 min=${2:-10} l
  l=$(($(left) - 5))
  ((l < cap)) && cap=$l
  ((cap < min)) && cap=0
  echo "$cap"
}
verdict() {
  case $1 in
    0) echo pass ;;
    77) echo "skipped (no CUDA device)" ;;
    124 | 137) echo TIMEOUT ;;
    *) echo FAIL ;;
  esac
}
# record NAME RC START NOTE: one summary line (also on stdout).
record() {
  [[ $(verdict "$2") == FAIL || $(verdict "$2") == TIMEOUT ]] && FAILED=1
  printf '%-20s rc=%-3s %4ds  %s: %s\n' "$1" "$2" $((SECONDS - $3)) "$(verdict "$2")" "$4" |
    tee -a "$OUT/summary.txt"
}
skip() { printf '%-20s skipped: %s\n' "$1" "$2" | tee -a "$OUT/summary.txt"; }
# Our executables find the extracted libraries here (not python3: it has its own).
gp_env() { LD_LIBRARY_PATH=$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$@"; }
# The last Catch2 result line of a log.
catch_result() { grep -E 'All tests passed|test cases:|No tests ran|no CUDA dev' "$1" | tail -1; }

stage_probe() {
  local t0=$SECONDS gpu note
  {
    echo "== nvidia-smi" && nvidia-smi
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
    echo "== nvcc ($NVCC)" && "$NVCC" --version
    echo "== torch ($PY)"
    "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
          "available", torch.cuda.is_available())'
    echo "== build tools" && cmake --version | head -1 && ninja --version && g++ --version | head -1
    echo "== profilers" && command -v nsys ncu
    ls /usr/local/cuda/bin /opt/nvidia 2>/dev/null
    echo "== host: $(nproc) cpus; tree: $(git rev-parse --short HEAD 2>/dev/null)" \
      "+$(git status --short 2>/dev/null | wc -l) changed paths"
  } >"$OUT/probe.log" 2>&1
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  note="${gpu:-no GPU}, nvcc $(grep -m1 -o 'release [0-9.]*' "$OUT/probe.log"),"
  record probe 0 "$t0" "$note $(grep -m1 '^torch ' "$OUT/probe.log")"
}

stage_deps() {
  local t0=$SECONDS n=0 rc=0 f link
  if ! compgen -G ".gpu/debs/*.deb" >/dev/null; then
    skip deps "no .gpu/debs (scripts/gpu/fetch_debs.sh, then copy it along); system packages only"
    return
  fi
  rm -rf "$ROOT" && mkdir -p "$ROOT"
  for f in .gpu/debs/{libspdlog,libfmt,libyaml-cpp,catch2,zlib1g}*.deb; do
    [[ -f $f ]] || continue
    dpkg -x "$f" "$ROOT" >>"$OUT/deps.log" 2>&1 || rc=1
    n=$((n + 1))
  done
  # zlib1g-dev's libz.so points at /lib/...: the extracted copy, not the host's (or none).
  while IFS= read -r link; do
    ln -sfn "$ROOT$(readlink "$link")" "$link" && echo "relinked $link" >>"$OUT/deps.log"
  done < <(find "$ROOT" -type l -lname '/*')
  record deps "$rc" "$t0" "$n debs into $ROOT"
}

stage_build() {
  local t0=$SECONDS t rc gen=() keep=(-- -k)
  command -v ninja >/dev/null && gen=(-G Ninja) && keep=(-- -k 0)
  t=$(budget 90 20)
  ((t == 0)) && { skip configure "no time left"; return; }
  timeout "$t" cmake -S . -B "$BUILD" "${gen[@]}" -DGP_CUDA_ONLY=ON -DCMAKE_BUILD_TYPE=Release \
    "-DCMAKE_CUDA_COMPILER=$NVCC" -DCMAKE_CUDA_ARCHITECTURES=90 "-DCMAKE_PREFIX_PATH=$ROOT/usr" \
    >"$OUT/build.log" 2>&1
  rc=$?
  record configure "$rc" "$t0" "$(grep -m1 -E 'CUDA compiler identification' "$OUT/build.log")"
  ((rc == 0)) || return
  t0=$SECONDS
  t=$(budget 300 60)
  ((t == 0)) && { skip build "no time left"; return; }
  gp_env timeout "$t" cmake --build "$BUILD" -j "$JOBS" "${keep[@]}" >>"$OUT/build.log" 2>&1
  rc=$?
  ((rc == 0)) || grep -E 'error:|FAILED:|undefined reference' "$OUT/build.log" | head -30
  record build "$rc" "$t0" "$(grep -c 'FAILED:' "$OUT/build.log") targets failed (build.log)"
}

stage_logic() {
  local t0=$SECONDS t rc exe=$BUILD/tests/compressors/cuda/gp_cuda_logic_tests
  [[ -x $exe ]] || { skip logic "not built"; return; }
  t=$(budget 90 10)
  ((t == 0)) && { skip logic "no time left"; return; }
  gp_env timeout "$t" "$exe" --durations yes >"$OUT/logic.log" 2>&1
  rc=$?
  ((rc == 77)) && rc=1  # 77 failed assertions (Catch's exit code), not "no device"
  record logic "$rc" "$t0" "$(catch_result "$OUT/logic.log")"
}

# One process per tag: [api], [topk], ... ([cuda] is on every test).
stage_device() {
  local t0 t rc tag tags log
  [[ -x $DEVICE_TESTS ]] || { skip device "not built"; return; }
  tags=$(gp_env timeout 30 "$DEVICE_TESTS" --list-tags |
    sed -n 's/.*\[\([^]!]*\)\].*/\1/p' | grep -vx cuda)
  [[ -n $tags ]] || { record "device tags" 1 "$SECONDS" "--list-tags listed none"; return; }
  for tag in $tags; do
    t0=$SECONDS
    t=$(budget 40 15)
    ((t == 0)) && { skip "device [$tag]" "no time left"; continue; }
    log=$OUT/device_tests/$tag.log
    gp_env timeout "$t" "$DEVICE_TESTS" "[$tag]" --durations yes >"$log" 2>&1
    rc=$?
    record "device [$tag]" "$rc" "$t0" "$(catch_result "$log")"
    ((rc == 77)) && { skip "device (other tags)" "no CUDA device"; return; }
  done
}

stage_torch() {
  local t0=$SECONDS t rc
  t=$(budget 90 20)
  ((t == 0)) && { skip torch "no time left"; return; }
  timeout "$t" "$PY" scripts/gpu/torch_reference.py >"$OUT/torch_reference.json" 2>"$OUT/torch.log"
  rc=$?
  ((rc == 0)) && TORCH_TOPK_US=$("$PY" -c \
    'import json,sys; print(json.loads(sys.stdin.readline())["torch_topk_us"])' \
    <"$OUT/torch_reference.json" 2>>"$OUT/torch.log")
  record torch "$rc" "$t0" "torch.topk ${TORCH_TOPK_US:-?} us; $(tail -1 "$OUT/torch.log")"
}

stage_bench() {
  local t0 t rc args=() mode note
  [[ -x $BENCH ]] || { skip bench "not built"; return; }
  [[ -n $TORCH_TOPK_US ]] && args=(--torch-topk-us "$TORCH_TOPK_US")
  local modes=(txt)
  [[ ${BENCH_JSON:-0} == 1 ]] && modes+=(json)
  for mode in "${modes[@]}"; do
    t0=$SECONDS
    t=$(budget 120 30)
    ((t == 0)) && { skip "bench ($mode)" "no time left"; continue; }
    [[ $mode == json ]] && args+=(--json)
    echo "+ gradpress-cuda-bench ${args[*]}" >>"$OUT/bench.log"
    gp_env timeout "$t" "$BENCH" "${args[@]}" >"$OUT/bench.$mode" 2>>"$OUT/bench.log"
    rc=$?
    note="$(grep -c 'misses' "$OUT/bench.$mode") rows miss a target,"
    note+=" $(grep -cE 'DIFF|FAILED' "$OUT/bench.$mode") fail their decode check"
    record "bench ($mode)" "$rc" "$t0" "$note"
    ((rc == 77)) && return
  done
}

# Method 5's codec at VGG11's tensor sizes (its largest, 512x512x3x3, and its smallest on the
# device path, 256x128x3x3): per-call cost where a training step meets it (docs/gpu.md).
stage_small() {
  local t0=$SECONDS t rc numel
  [[ -x $BENCH ]] || { skip small "not built"; return; }
  : >"$OUT/bench_small.txt"
  for numel in 2359296 294912; do
    t=$(budget 40 10)
    ((t == 0)) && { skip "small ($numel)" "no time left"; continue; }
    gp_env timeout "$t" "$BENCH" --numel "$numel" --repeats 50 \
      --codec "topk ratio=0.01 error_feedback=true then=qsgd levels=16" \
      --codec "topk ratio=0.01 then=qsgd levels=16" >>"$OUT/bench_small.txt" 2>>"$OUT/bench.log"
    rc=$?
    record "small ($numel)" "$rc" "$t0" "bench_small.txt"
    ((rc == 77)) && return
  done
}

# scripts/gpu/cupti_trace.cc built into $TRACE_LIB (once), against the CUDA toolkit's CUPTI or
# the PyTorch wheel's; false (and no library) where neither is found.
TRACE_LIB=/tmp/libgp_trace.so
build_trace() {
  [[ -f $TRACE_LIB ]] && return 0
  local py_cupti lib="" inc="" d
  py_cupti=$("$PY" -c 'import nvidia.cuda_cupti as m, os; print(os.path.dirname(m.__file__))' \
    2>/dev/null)
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/extras/CUPTI/lib64 \
    "$py_cupti/lib"; do
    [[ -z $lib ]] && lib=$(compgen -G "$d/libcupti.so*" | head -1)
  done
  for d in /usr/local/cuda/include /usr/local/cuda/extras/CUPTI/include "$py_cupti/include"; do
    [[ -z $inc && -f $d/cupti.h ]] && inc=$d
  done
  [[ -n $lib && -n $inc ]] || { echo "no CUPTI (library '$lib', headers '$inc')"; return 1; }
  g++ -std=c++17 -shared -fPIC -O2 -I"$inc" "$REPO/scripts/gpu/cupti_trace.cc" \
    "$lib" -Wl,-rpath,"$(dirname "$lib")" -o "$TRACE_LIB"
}

# Where small's per-call cost goes: the first small row (2.36M floats, error feedback) under
# Nsight Systems when the machine has it, else under the CUPTI trace (cupti_trace.cc): CUDA API
# calls (launches, waits), kernel and copy times, summed over the bench's calls -> profile.txt.
stage_profile() {
  local t0=$SECONDS t rc nsys
  [[ -x $BENCH ]] || { skip profile "not built"; return; }
  local args=(--numel 2359296 --repeats 50
    --codec "topk ratio=0.01 error_feedback=true then=qsgd levels=16")
  nsys=$(command -v nsys || compgen -G "/usr/local/cuda/bin/nsys" ||
    compgen -G "/opt/nvidia/nsight-systems/*/bin/nsys" | tail -1)
  t=$(budget 90 30)
  ((t == 0)) && { skip profile "no time left"; return; }
  if [[ -n $nsys ]]; then
    gp_env timeout "$t" "$nsys" profile --force-overwrite true -o /tmp/gp-small "$BENCH" \
      "${args[@]}" >"$OUT/profile.log" 2>&1 &&
      timeout 60 "$nsys" stats --report cuda_api_sum,cuda_gpu_kern_sum,cuda_gpu_mem_time_sum \
        /tmp/gp-small.nsys-rep >"$OUT/profile.txt" 2>>"$OUT/profile.log"
    rc=$?
    record profile "$rc" "$t0" "profile.txt ($nsys)"
    return
  fi
  build_trace >"$OUT/profile.log" 2>&1 ||
    { skip profile "no nsys, no CUPTI (profile.log)"; return; }
  CUDA_INJECTION64_PATH=$TRACE_LIB GP_TRACE_OUT=$OUT/profile.txt gp_env timeout "$t" "$BENCH" \
    "${args[@]}" >>"$OUT/profile.log" 2>&1
  rc=$?
  [[ -s $OUT/profile.txt ]] || rc=1
  record profile "$rc" "$t0" "profile.txt (CUPTI trace)"
}

# The LibTorch build of docs/gpu.md and its training runs (needs .gpu/data and .gpu/src.tar.gz
# too): LeNet methods 5 and 1 alternated, VGG11 methods 5 and 1, the CUDA half of
# key_codecs_test, and the runs' per-step medians (full/medians.txt).
stage_full() {
  local t0=$SECONDS t rc
  [[ ${FULL:-0} == 1 ]] || { skip full "off (FULL=1 runs scripts/gpu/build_and_test.sh)"; return; }
  t=$(budget 600 120)
  ((t == 0)) && { skip full "no time left"; return; }
  OUT=$OUT/full BUDGET_S=$((t - 20)) STAGES=${FULL_STAGES:-probe,deps,configure,build,train} \
    BUILD_TARGETS=${BUILD_TARGETS:-gradpress-server gradpress-worker gp_worker_trainer_tests} \
    EPOCHS=${EPOCHS:-2} TRAIN_CONFIGS=${TRAIN_CONFIGS:-m5 m1 m5 m1} \
    VGG_CONFIGS=${VGG_CONFIGS:-m5 m1} VGG_STEPS=${VGG_STEPS:-150} VGG_WORKERS=${VGG_WORKERS:-2} \
    timeout "$t" bash scripts/gpu/build_and_test.sh >"$OUT/full.log" 2>&1
  rc=$?
  record full "$rc" "$t0" "see full/log.txt"
  "$PY" scripts/gpu/step_medians.py /tmp/gp-runs/* --skip 20 >"$OUT/full/medians.txt" 2>&1
  local exe=/tmp/gp-src/build-gpu/tests/worker/trainer/gp_worker_trainer_tests
  [[ -x $exe ]] || { skip key_codecs "not built"; return; }
  t0=$SECONDS
  gp_env timeout 60 "$exe" '[key_codecs]' >"$OUT/key_codecs.log" 2>&1
  record key_codecs $? "$t0" "$(catch_result "$OUT/key_codecs.log")"
}

# One more VGG11 method-5 run with one worker, under the CUPTI trace (cupti_trace.cc): where a
# training run's GPU time and host waits go (kernels, copies, runtime calls, synchronisations),
# summed over its steps -> trace.txt. Reuses full's build; skipped without it or CUPTI.
stage_trace() {
  local t0=$SECONDS t rc f=/tmp/gp-runs/vgg11-cifar10-m5-cuda-w1-trace/trace-0.txt
  [[ ${FULL:-0} == 1 && -x /tmp/gp-src/build-gpu/worker/gradpress-worker ]] ||
    { skip trace "needs full's build"; return; }
  build_trace >"$OUT/trace.log" 2>&1 || { skip trace "no CUPTI (trace.log)"; return; }
  t=$(budget 90 40)
  ((t == 0)) && { skip trace "no time left"; return; }
  OUT=$OUT/trace BUDGET_S=$((t - 5)) STAGES=train TRAIN_CONFIGS=" " VGG_CONFIGS=m5 \
    VGG_WORKERS=1 VGG_STEPS=${VGG_STEPS:-150} TRACE_LIB=$TRACE_LIB \
    timeout "$t" bash scripts/gpu/build_and_test.sh >>"$OUT/trace.log" 2>&1
  rc=$?
  if [[ -s $f ]]; then cp "$f" "$OUT/trace.txt"; else rc=1; fi
  record trace "$rc" "$t0" "trace.txt"
}

for stage in ${STAGES//,/ }; do
  echo "=== $stage (t=$((SECONDS - T0))s, $(left)s left)"
  "stage_$stage"
done
echo "=== summary ($((SECONDS - T0))s of $BUDGET_S)"
cat "$OUT/summary.txt"
# A few files are enough to copy back: the summary, the bench tables, the training medians,
# profile.txt and trace.txt stay on top of $OUT, and every log this script wrote goes into
# logs.tar.gz.
[[ -f $OUT/full/medians.txt ]] && cp "$OUT/full/medians.txt" "$OUT/medians.txt"
# Files over 2 MiB (the training runs' checkpoints) stay behind: one file comes back up to 16 MiB.
(cd "$OUT" && find ./*.log torch_reference.json bench.json device_tests full trace -type f \
  -size -2M 2>/dev/null | tar -czf logs.tar.gz -T - 2>/dev/null)
rm -rf "$OUT"/*.log "$OUT/torch_reference.json" "$OUT/bench.json" "$OUT/device_tests" \
  "$OUT/full" "$OUT/trace"
ls "$OUT"
exit "$FAILED"
