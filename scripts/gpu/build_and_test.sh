#!/usr/bin/env bash
# Runs ON the GPU machine, from the root of a copied checkout: builds
# gradpress against the LibTorch inside the machine's PyTorch plus the Debian bookworm
# packages in .gpu/debs, then tests, benchmarks and trains on the GPU. The recipe,
# and what each stage measured, are in docs/gpu.md. Prepare the .gpu/ folders first
# with scripts/gpu/fetch_debs.sh.
#
#   bash scripts/gpu/build_and_test.sh                 # every stage, inside BUDGET_S seconds
#   STAGES=probe,deps,restore,fast bash scripts/gpu/build_and_test.sh
#
# Stages, in order (STAGES picks a subset):
#   probe      OS, glibc, compilers, GPU, torch version / CXX11 ABI / CUDA
#   deps       dpkg -x .gpu/debs/*.deb into .gpu/root; unpack .gpu/src.tar.gz (HEAD)
#   configure  cmake with the wheel's TorchConfig.cmake and the extracted packages
#   build      cmake --build -j16 (ninja -k 0: every error, not just the first); only the
#              targets in BUILD_TARGETS when set (e.g. "gradpress-server gradpress-worker")
#   pack       build tree without objects -> $OUT/prebuilt.tar.gz (a later call can `restore`)
#   restore    unpack .gpu/prebuilt.tar.gz instead of configure + build
#   fast       ctest -LE slow
#   train      server + 2 workers, device=cuda, LeNet Fashion-MNIST, methods $TRAIN_CONFIGS
#              (default "m5 m1"), EPOCHS epochs (default 10), WORKERS workers (default 2),
#              extra worker arguments in TRAIN_ARGS (e.g. "--max-steps 1500"); then VGG11
#              on synthetic CIFAR-shaped data for the methods in VGG_CONFIGS (e.g. "m5 m1"),
#              VGG_STEPS steps each (default 100), with each worker count in VGG_WORKERS
#              (default WORKERS: e.g. "2 1", two workers sharing the GPU, then one alone);
#              SERVER_THREADS sets the server's server.threads in every run (the config's
#              otherwise; the run's name gets -s<N>); TRACE_LIB (scripts/gpu/cupti_trace.cc
#              built) traces the workers into trace-<rank>.txt (the run's name gets -trace)
#   codecs     gradpress-bench codecs
#   cudaprobe  scripts/gpu/cuda_codec_probe.cc: Encode/Decode on CUDA tensors
#   transport  gradpress-bench transport
#   traincpu   the same for method 5 with device=cpu, TRAIN_CPU_STEPS steps, for comparison
#   slow       ctest -L slow
# Each stage gets at most the seconds left before BUDGET_S (default 570); stages that
# would not fit are skipped and say so. Logs go to $OUT (default .gpu/out):
# log.txt (everything), build.log, ctest_fast.log, ctest_slow.log, bench.txt,
# runs.tar.gz, prebuilt.tar.gz.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO" || exit 1
OUT=${OUT:-$REPO/.gpu/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1

STAGES=${STAGES:-probe,deps,configure,build,pack,fast,train,codecs,cudaprobe,transport,traincpu,slow}
BUDGET_S=${BUDGET_S:-570}
EPOCHS=${EPOCHS:-10}
TRAIN_CPU_STEPS=${TRAIN_CPU_STEPS:-500}
JOBS=${JOBS:-16}
GPU=$REPO/.gpu
ROOT=$GPU/root                      # the extracted Debian packages
LIBDIR=$ROOT/usr/lib/x86_64-linux-gnu
INC_FIRST=$GPU/inc-first            # fmt/, spdlog/, google/ of Debian, ahead of the wheel's own
DATA=$GPU/data/fashion-mnist
if [[ -f $GPU/src.tar.gz ]]; then SRC=/tmp/gp-src; else SRC=$REPO; fi
BUILD=$SRC/build-gpu
RUNS=/tmp/gp-runs
T0=$SECONDS
declare -a SUMMARY=()

want() { [[ ",$STAGES," == *",$1,"* ]]; }
left() { echo $((BUDGET_S - (SECONDS - T0))); }
note() { SUMMARY+=("$(printf '%-10s %s' "$1" "$2")"); echo ">> $1: $2"; }
# Seconds a stage may take: its cap, or what is left minus a margin; 0 = skip.
budget() {
  local cap=$1 l
  l=$(($(left) - 10))
  ((l < cap)) && cap=$l
  ((cap < ${2:-20})) && cap=0
  echo "$cap"
}
section() { echo; echo "=== $1 (t=$((SECONDS - T0))s, $(left)s left)"; }
# Our executables find the Debian libraries (and their dependencies) here.
gp_env() { LD_LIBRARY_PATH=$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$@"; }

torch_info() {
  python3 - <<'PY'
import os, torch
print("TORCH_VERSION=%s" % torch.__version__)
print("TORCH_CUDA=%s" % torch.version.cuda)
print("TORCH_ABI=%d" % int(torch._C._GLIBCXX_USE_CXX11_ABI))
print("TORCH_PREFIX=%s" % torch.utils.cmake_prefix_path)
print("TORCH_DIR=%s" % os.path.dirname(torch.__file__))
PY
}
eval "$(torch_info 2>/dev/null | grep -E '^TORCH_[A-Z_]+=')"
: "${TORCH_DIR:=}" "${TORCH_PREFIX:=}" "${TORCH_ABI:=1}" "${TORCH_VERSION:=?}"

# Linked ahead of everything else (first on the link line and in DT_NEEDED, so first in
# symbol lookup): the wheel's libtorch_cpu.so exports, unversioned, the std::filesystem code
# it linked statically (pytorch/pytorch#133437). Linked after it, libstdc++ was dropped as
# not needed (--as-needed) and std::filesystem::remove_all bound to torch's copy and
# crashed. A path, not -lstdc++: g++ moves a -lstdc++ of the user to the end of the line.
LIBSTDCXX=$(g++ -print-file-name=libstdc++.so)
FIRST_LIBS="-Wl,--no-as-needed $LIBSTDCXX $LIBDIR/libprotobuf.so -Wl,--as-needed"
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null | head -1 || true)

if want probe; then
  section probe
  uname -srm
  grep -E '^(PRETTY_NAME|VERSION_ID)=' /etc/os-release
  glibc=$(getconf GNU_LIBC_VERSION | awk '{print $2}')
  echo "glibc $glibc"
  if [[ $(printf '%s\n2.36\n' "$glibc" | sort -V | head -1) != 2.36 ]]; then
    echo "WARNING: glibc $glibc < 2.36: Debian bookworm libraries will not load here"
  fi
  echo "cpus $(nproc), $(free -g | awk '/Mem:/{print $2}') GiB memory, /tmp: $(df -h /tmp | awk 'NR==2{print $4}') free"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
  for t in gcc g++ cmake ninja dpkg ar python3 ccache; do
    printf '  %-8s %s\n' "$t" "$(command -v "$t" || echo missing)"
  done
  printf '  %-8s %s\n' nvcc "${NVCC:-missing}"
  g++ --version | head -1
  cmake --version | head -1
  command -v ninja >/dev/null && echo "ninja $(ninja --version)"
  [[ -n $NVCC ]] && "$NVCC" --version | tail -2
  python3 - <<'PY'
import os, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
print("torch._C._GLIBCXX_USE_CXX11_ABI", torch._C._GLIBCXX_USE_CXX11_ABI)
print("cuda available", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
print("cmake prefix", torch.utils.cmake_prefix_path)
inc = os.path.join(os.path.dirname(torch.__file__), "include")
print("torch/include:", " ".join(sorted(os.listdir(inc))))
for h in ("fmt/core.h", "google/protobuf/stubs/common.h", "nlohmann/json.hpp"):
    print("  bundles %s: %s" % (h, os.path.exists(os.path.join(inc, h))))
PY
  note probe "torch $TORCH_VERSION, CUDA ${TORCH_CUDA:-?}, CXX11 ABI $TORCH_ABI, glibc $glibc"
fi

if want deps; then
  section deps
  rm -rf "$ROOT" && mkdir -p "$ROOT"
  n=0
  for f in "$GPU"/debs/*.deb; do
    if command -v dpkg >/dev/null; then
      dpkg -x "$f" "$ROOT"
    else
      (t=$(mktemp -d) && cd "$t" && ar x "$f" && tar -xf data.tar.* -C "$ROOT" && rm -rf "$t")
    fi
    n=$((n + 1))
  done
  mkdir -p "$INC_FIRST"
  for d in fmt spdlog google; do ln -sfn "$ROOT/usr/include/$d" "$INC_FIRST/$d"; done
  # protoc (and the grpc_cpp_plugin it runs) need the Debian libraries at build time.
  cat >"$GPU/protoc" <<EOF
#!/bin/sh
LD_LIBRARY_PATH=$LIBDIR\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} exec $ROOT/usr/bin/protoc "\$@"
EOF
  chmod +x "$GPU/protoc"
  "$GPU/protoc" --version
  missing=$(gp_env ldd "$ROOT"/usr/bin/grpc_cpp_plugin "$LIBDIR"/libgrpc++.so.1.51 | grep 'not found' | sort -u)
  [[ -n $missing ]] && echo "unresolved: $missing"
  if [[ $SRC != "$REPO" ]]; then
    rm -rf "$SRC" && mkdir -p "$SRC" && tar -xzf "$GPU/src.tar.gz" -C "$SRC"
    echo "source: $GPU/src.tar.gz ($(cat "$SRC/.gp_commit" 2>/dev/null || echo '?')) -> $SRC"
  fi
  # The path configs/*.yaml and the Fashion-MNIST test expect, as the Debian package has it.
  if [[ ! -e /usr/share/datasets/fashion-mnist && -d $DATA ]]; then
    mkdir -p /usr/share/datasets && ln -s "$DATA" /usr/share/datasets/fashion-mnist
  fi
  note deps "$n debs extracted, $(du -sh "$ROOT" | cut -f1); ${missing:-all libraries resolve}"
fi

configure_with() {
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  local args=(-S "$SRC" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release
    "-DCMAKE_PREFIX_PATH=$TORCH_PREFIX;$ROOT/usr"
    "-DCMAKE_CXX_FLAGS=-I$INC_FIRST"
    "-DCMAKE_EXE_LINKER_FLAGS=$FIRST_LIBS"
    "-DProtobuf_PROTOC_EXECUTABLE=$GPU/protoc"
    "-DCMAKE_PROJECT_INCLUDE=$REPO/scripts/gpu/deps.cmake" "-DGP_DEB_ROOT=$ROOT"
    -DCMAKE_CUDA_ARCHITECTURES=90)
  [[ -n $NVCC ]] && args+=("-DCMAKE_CUDA_COMPILER=$NVCC")
  # The dashboard's Chart.js, from the libjs-chart.js package in .gpu/debs.
  local chart=$ROOT/usr/share/javascript/chart.js/chart.min.js
  [[ -f $chart ]] && args+=("-DGP_CHARTJS=$chart")
  echo "+ cmake ${args[*]}"
  TORCH_CUDA_ARCH_LIST=9.0 timeout "$(budget 120)" cmake "${args[@]}"
}

if want configure; then
  section configure
  rm -rf "$BUILD"
  if configure_with >"$OUT/build.log" 2>&1; then
    note configure "ok with the wheel's TorchConfig.cmake"
  else
    tail -25 "$OUT/build.log"
    note configure "FAILED, see build.log"
  fi
  grep -E 'Caffe2|Torch|Protobuf|gRPC|CUDA|Found' "$OUT/build.log" | head -30
fi

if want build; then
  section build
  t=$(budget 330 60)
  if [[ ! -f $BUILD/CMakeCache.txt ]]; then
    note build "skipped: not configured"
  elif ((t == 0)); then
    note build "skipped: no time left"
  else
    keep=()
    [[ -f $BUILD/build.ninja ]] && keep=(-- -k 0)
    # shellcheck disable=SC2206  # BUILD_TARGETS is a space-separated list
    [[ -n ${BUILD_TARGETS:-} ]] && keep=(--target ${BUILD_TARGETS} "${keep[@]}")
    start=$SECONDS
    # Under gp_env: catch_discover_tests runs each test executable right after linking it,
    # and libgrpc's own dependencies (libupb, absl, ...) resolve only through
    # LD_LIBRARY_PATH (RUNPATH does not apply to them); without it the server and trainer
    # suites register no tests at all.
    if gp_env timeout "$t" cmake --build "$BUILD" -j "$JOBS" "${keep[@]}" >>"$OUT/build.log" 2>&1; then
      note build "ok in $((SECONDS - start)) s (-j$JOBS)"
    else
      grep -E 'error|Error|undefined reference' "$OUT/build.log" | head -40
      note build "FAILED after $((SECONDS - start)) s: $(grep -c 'error:' "$OUT/build.log") 'error:' lines, see build.log"
    fi
    ls -la "$BUILD"/server/gradpress-server "$BUILD"/worker/gradpress-worker "$BUILD"/bench/gradpress-bench 2>&1
  fi
fi

if want pack && [[ -x $BUILD/worker/gradpress-worker ]]; then
  section pack
  tar -czf "$OUT/prebuilt.tar.gz" -C / --exclude='*.o' --exclude='*.ninja_deps' "${BUILD#/}" \
    && note pack "$OUT/prebuilt.tar.gz: $(du -h "$OUT/prebuilt.tar.gz" | cut -f1)"
fi

if want restore; then
  section restore
  if [[ -f $GPU/prebuilt.tar.gz ]]; then
    tar -xzf "$GPU/prebuilt.tar.gz" -C / && note restore "build tree restored to $BUILD"
  else
    note restore "no .gpu/prebuilt.tar.gz"
  fi
fi

run_ctest() {  # name label-args...
  local name=$1 t
  shift
  t=$(budget "${CTEST_CAP:-200}")
  if [[ ! -f $BUILD/CTestTestfile.cmake ]] || ((t == 0)); then
    note "$name" "skipped ($( ((t == 0)) && echo 'no time left' || echo 'not built'))"
    return
  fi
  (cd "$BUILD" && gp_env timeout "$t" ctest "$@" -j 8 --timeout 300 --output-on-failure) \
    >"$OUT/ctest_$name.log" 2>&1
  local rc=$?
  grep -E 'tests passed|tests failed|\*\*\*Failed|\*\*\*Timeout|Exception|Not Run|Total Test' \
    "$OUT/ctest_$name.log" | head -30
  note "$name" "rc=$rc: $(grep -E 'tests passed' "$OUT/ctest_$name.log" || echo 'no ctest summary (timed out?)')"
}

field() { sed -n "s/.*\"$2\"[[:space:]]*:[[:space:]]*\"\{0,1\}\([^,\"}]*\).*/\1/p" "$1" | head -1; }

# One run: server + $WORKERS (default 2) workers on this machine, as scripts/run.sh does (run.sh itself calls
# scripts/setup.sh, which would try apt-get here). Args: config device tag [extra worker args].
train_run() {
  local cfg=$1 device=$2 tag=$3
  shift 3
  local t name run_dir port="" server_pid smi_pid
  t=$(budget "${TRAIN_CAP:-170}" 30)
  local workers=${WORKERS:-2}
  name=$(sed -n 's/^name:[[:space:]]*\([^[:space:]#]*\).*/\1/p' "$SRC/$cfg")-$device
  [[ $workers == 2 ]] || name+=-w$workers
  local server_sets=() trace_env=()
  if [[ -n ${TRACE_LIB:-} ]]; then
    trace_env=(env "CUDA_INJECTION64_PATH=$TRACE_LIB")
    name+=-trace
  fi
  if [[ -n ${SERVER_THREADS:-} ]]; then
    server_sets=(--set "server.threads=$SERVER_THREADS")
    name+=-s$SERVER_THREADS
  fi
  if [[ ! -x $BUILD/worker/gradpress-worker ]] || ((t == 0)); then
    note "$tag" "$name skipped"
    return
  fi
  run_dir=$RUNS/$name
  rm -rf "$run_dir" && mkdir -p "$run_dir"
  local sets=(--set "dataset.path=${RUN_DATA:-$DATA}" --set "device=$device"
    --set "train.epochs=$EPOCHS")
  echo "== $cfg ${sets[*]} $* -> $run_dir (limit ${t}s)"
  gp_env "$BUILD/server/gradpress-server" --config "$SRC/$cfg" "${sets[@]}" "${server_sets[@]}" \
    --listen 127.0.0.1:0 --workers "$workers" --log-file "$run_dir/server.log" >"$run_dir/server.out" 2>&1 &
  server_pid=$!
  for _ in $(seq 300); do
    port=$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$run_dir/server.out" | head -1)
    [[ -n $port ]] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ -z $port ]]; then
    cat "$run_dir/server.out"
    note "$tag" "$name: server did not start"
    kill "$server_pid" 2>/dev/null
    return
  fi
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -lms 1000 \
    >"$run_dir/nvidia-smi.csv" 2>&1 &
  smi_pid=$!
  local pids=() start=$SECONDS
  for ((r = 0; r < workers; r++)); do
    GP_TRACE_OUT=$run_dir/trace-$r.txt gp_env "${trace_env[@]}" timeout "$t" \
      "$BUILD/worker/gradpress-worker" --config "$SRC/$cfg" "${sets[@]}" \
      --rank "$r" --workers "$workers" --server "127.0.0.1:$port" --run-dir "$run_dir" "$@" \
      >"$run_dir/worker-$r.log" 2>&1 &
    pids+=($!)
  done
  local rcs=""
  for p in "${pids[@]}"; do
    wait "$p"
    rcs+="$? "
  done
  kill "$smi_pid" 2>/dev/null
  kill -TERM "$server_pid" 2>/dev/null
  wait "$server_pid" 2>/dev/null
  grep -E 'device|cuda|CUDA|test_acc|done:|error|Error' "$run_dir/worker-0.log" | head -20
  ((workers > 1)) && tail -3 "$run_dir/worker-1.log"
  local s=$run_dir/summary.json
  if [[ -f $s ]]; then
    cat "$s"
    echo
    note "$tag" "$(printf '%s: test_acc %s, %s ms/step (compute %s encode %s network %s decode %s wait %s), %s B up / %s B down per step, %s steps, %s s (worker rcs %s)' \
      "$name" "$(field "$s" test_acc)" "$(field "$s" step_ms)" "$(field "$s" compute_ms)" \
      "$(field "$s" encode_ms)" "$(field "$s" network_ms)" "$(field "$s" decode_ms)" \
      "$(field "$s" wait_ms)" "$(field "$s" bytes_up_per_step)" \
      "$(field "$s" bytes_down_per_step)" "$(field "$s" steps)" "$(field "$s" wall_s)" "$rcs")"
  else
    tail -20 "$run_dir/worker-0.log"
    note "$tag" "$name: no summary.json (worker rcs $rcs, $((SECONDS - start)) s)"
  fi
  awk -F', ' 'NR>1 && $2+0>0 {u+=$2; n++; if ($3+0>m) m=$3+0} END {if (n) printf "nvidia-smi: mean GPU utilization %.0f%% over %d busy samples, peak memory %d MiB\n", u/n, n, m}' \
    "$run_dir/nvidia-smi.csv"
}

if want fast; then
  section "ctest -LE slow"
  CTEST_CAP=200 run_ctest fast -LE slow
fi

if want train; then
  section "training on cuda"
  mkdir -p "$RUNS"
  # shellcheck disable=SC2086
  for c in ${TRAIN_CONFIGS:-m5 m1}; do
    train_run "configs/lenet_fmnist_$c.yaml" cuda "$c-cuda" ${TRAIN_ARGS:-}
  done
  # VGG11-BN, batch 128, on synthetic CIFAR-shaped data (scripts/synth_cifar.py): VGG_STEPS steps
  # of each method in VGG_CONFIGS (default none).
  if [[ -n ${VGG_CONFIGS:-} ]]; then
    synth=$GPU/synth-cifar
    [[ -f $synth/test_batch.bin ]] || python3 "$REPO/scripts/synth_cifar.py" "$synth" --train 2560 --test 256
    for w in ${VGG_WORKERS:-${WORKERS:-2}}; do
      for c in $VGG_CONFIGS; do
        # 10 steps make an epoch of this set: enough epochs for VGG_STEPS steps
        WORKERS=$w EPOCHS=1000 RUN_DATA=$synth train_run "configs/vgg11_cifar10_$c.yaml" cuda \
          "vgg-$c-cuda-w$w" --max-steps "${VGG_STEPS:-100}"
      done
    done
  fi
fi

BENCH=$BUILD/bench/gradpress-bench
if want codecs; then
  section "gradpress-bench codecs"
  t=$(budget 120)
  if [[ -x $BENCH ]] && ((t > 0)); then
    echo "+ gradpress-bench codecs" | tee -a "$OUT/bench.txt"
    gp_env timeout "$t" "$BENCH" codecs 2>&1 | tee -a "$OUT/bench.txt"
    note codecs "rc=${PIPESTATUS[0]}"
  else
    note codecs "skipped"
  fi
fi

if want cudaprobe; then
  section "gp-cuda-codec-probe"
  t=$(budget 150 40)
  if [[ -f $BUILD/compressors/libgp_compressors.a ]] && ((t > 0)); then
    start=$SECONDS
    # Flags as the CMake build uses them; Debian's spdlog is compiled with external fmt.
    if timeout "$t" g++ -std=c++17 -O2 -DNDEBUG "-D_GLIBCXX_USE_CXX11_ABI=$TORCH_ABI" \
      -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL -I"$SRC" -I"$INC_FIRST" \
      -isystem "$TORCH_DIR/include" -isystem "$TORCH_DIR/include/torch/csrc/api/include" \
      -isystem "$ROOT/usr/include" "$REPO/scripts/gpu/cuda_codec_probe.cc" \
      "$BUILD/compressors/libgp_compressors.a" "$BUILD/common/libgp_common.a" \
      $FIRST_LIBS -L"$TORCH_DIR/lib" -Wl,--no-as-needed -ltorch_cuda -Wl,--as-needed -ltorch -ltorch_cpu \
      -lc10_cuda -lc10 "$LIBDIR/libspdlog.so" "$LIBDIR/libfmt.so" "$LIBDIR/libyaml-cpp.so" \
      -pthread -Wl,-rpath,"$TORCH_DIR/lib:$LIBDIR" -o "$BUILD/gp-cuda-codec-probe"; then
      t=$(budget 120)
      echo "+ gp-cuda-codec-probe ${PROBE_ARGS:-25000000 7}" | tee -a "$OUT/bench.txt"
      # shellcheck disable=SC2086
      gp_env timeout "$t" "$BUILD/gp-cuda-codec-probe" ${PROBE_ARGS:-25000000 7} 2>&1 |
        tee -a "$OUT/bench.txt"
      note cudaprobe "rc=${PIPESTATUS[0]} ($((SECONDS - start)) s with its compile)"
    else
      note cudaprobe "compile FAILED"
    fi
  else
    note cudaprobe "skipped"
  fi
fi

if want transport; then
  section "gradpress-bench transport"
  t=$(budget 120)
  if [[ -x $BENCH ]] && ((t > 0)); then
    echo "+ gradpress-bench transport" | tee -a "$OUT/bench.txt"
    gp_env timeout "$t" "$BENCH" transport 2>&1 | tee -a "$OUT/bench.txt"
    note transport "rc=${PIPESTATUS[0]}"
  else
    note transport "skipped"
  fi
fi

if want traincpu; then
  section "training on cpu (same machine, for comparison)"
  mkdir -p "$RUNS"
  TRAIN_CAP=90 train_run configs/lenet_fmnist_m5.yaml cpu m5-cpu --max-steps "$TRAIN_CPU_STEPS"
fi

if want slow; then
  section "ctest -L slow"
  CTEST_CAP=400 run_ctest slow -L slow
fi

[[ -d $RUNS ]] && tar -czf "$OUT/runs.tar.gz" -C "$(dirname "$RUNS")" "$(basename "$RUNS")"
section summary
printf '%s\n' "${SUMMARY[@]}"
sleep 1  # let tee finish writing log.txt
