#!/usr/bin/env bash
# A sweep: every config (default: the six methods) at every point of a grid of overrides,
# run by gradpress-sim (one process, N simulated workers) or on the cluster (scripts/run.sh);
# one CSV row per run and PNG plots per method, like the survey's results figure.
#
#   scripts/sweep.sh --mode sim configs/lenet_fmnist_m{1,5}.yaml --grid train.lr=0.01,0.05
#   scripts/sweep.sh --mode sim --grid push.ratio=0.1,0.01,0.001 --grid train.batch_size=32,64 \
#       configs/lenet_fmnist_m5.yaml --set train.epochs=2
#   scripts/sweep.sh --mode cluster configs/lenet_fmnist_m{1,2,3,4,5,6}.yaml
#
# Options: --mode sim|cluster (default sim), --grid key=v1,v2,... (repeatable; the cartesian
# product of all grids; values may not contain commas), --set key=value (every run),
# --workers N (default 2), --out DIR (default runs/sweep-<timestamp>).
# Writes DIR/results.csv: name, method, one column per grid key, test_acc, bytes_up_per_step,
# bytes_down_per_step, ratio_up, ratio_down, step_ms, compute_ms, encode_ms, network_ms,
# decode_ms, wait_ms, wall_s, mode, run_dir (summary.json's fields; name = the config's name
# plus the grid point, method = the config's name); and DIR/accuracy.png, time.png (compute
# against communication, stacked, ms per step), bytes.png (payload bytes per worker per step,
# log scale), total_time.png (wall seconds) and results.png (all four). Sim runs go to
# DIR/runs/<name>/; cluster runs to scripts/run.sh's runs/<name>/<timestamp>/.
# Environment: BUILD_DIR (default build), SIM_BIN (default $BUILD_DIR/sim/gradpress-sim).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=sim
workers=2
out=""
configs=()
sets=()
grid_keys=()
grid_values=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --mode) mode=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    --grid)
      [[ "$2" == *=* ]] || { echo "sweep.sh: --grid takes key=v1,v2,..., got '$2'" >&2; exit 2; }
      grid_keys+=("${2%%=*}"); grid_values+=("${2#*=}"); shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    -*) echo "sweep.sh: unknown option '$1'" >&2; exit 2 ;;
    *) [[ -f "$1" ]] || { echo "sweep.sh: no config file '$1'" >&2; exit 2; }
       configs+=("$1"); shift ;;
  esac
done
[[ "$mode" == sim || "$mode" == cluster ]] || { echo "sweep.sh: --mode is sim or cluster" >&2; exit 2; }
[[ "$workers" =~ ^[1-9][0-9]*$ ]] || { echo "sweep.sh: --workers takes a positive integer" >&2; exit 2; }
[[ ${#configs[@]} -gt 0 ]] || configs=(configs/lenet_fmnist_m{1,2,3,4,5,6}.yaml)
command -v gnuplot >/dev/null || { echo "sweep.sh: gnuplot missing (scripts/setup.sh installs it)" >&2; exit 1; }
out=${out:-runs/sweep-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"

BUILD_DIR=${BUILD_DIR:-build}
sim_bin=${SIM_BIN:-$BUILD_DIR/sim/gradpress-sim}
if [[ "$mode" == sim && -z "${SIM_BIN:-}" ]]; then
  if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
    launcher=()
    command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
    cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >/dev/null
  fi
  echo "sweep.sh: building gradpress-sim (first time: several minutes)"
  cmake --build "$BUILD_DIR" -j "${JOBS:-2}" --target gradpress-sim >/dev/null
fi

# The grid's points: one line each, overrides separated by tabs.
points=("")
for g in "${!grid_keys[@]}"; do
  IFS=',' read -r -a vals <<<"${grid_values[$g]}"
  [[ ${#vals[@]} -gt 0 ]] || { echo "sweep.sh: --grid ${grid_keys[$g]} has no values" >&2; exit 2; }
  next=()
  for p in "${points[@]}"; do
    for v in "${vals[@]}"; do next+=("${p:+$p$'\t'}${grid_keys[$g]}=$v"); done
  done
  points=("${next[@]}")
done

# Reads one field of a JSON object file (scripts/json_field.py: Python's json module).
field() { python3 scripts/json_field.py "$1" "$2"; }
fields=(test_acc bytes_up_per_step bytes_down_per_step ratio_up ratio_down step_ms compute_ms
        encode_ms network_ms decode_ms wait_ms wall_s)
csv=$out/results.csv
{
  printf 'name,method'
  for k in "${grid_keys[@]}"; do printf ',%s' "$k"; done
  printf ',%s' "${fields[@]}"
  printf ',mode,run_dir\n'
} >"$csv"

total=$((${#configs[@]} * ${#points[@]}))
i=0
for cfg in "${configs[@]}"; do
  method=$(sed -n 's/^name:[[:space:]]*\([^[:space:]#]*\).*/\1/p' "$cfg" | head -1)
  method=${method:-$(basename "$cfg" .yaml)}
  for p in "${points[@]}"; do
    i=$((i + 1))
    overrides=()
    values=()
    suffix=""
    if [[ -n "$p" ]]; then
      IFS=$'\t' read -r -a kvs <<<"$p"
      for kv in "${kvs[@]}"; do
        overrides+=(--set "$kv")
        values+=("${kv#*=}")
        key=${kv%%=*}
        suffix+="_${key##*.}${kv#*=}"
      done
    fi
    name=$(printf '%s' "$method$suffix" | tr -c 'A-Za-z0-9._+-' '_')
    echo "== [$i/$total] $name ($mode, $workers workers)"
    if [[ "$mode" == sim ]]; then
      run_dir=$out/runs/$name
      mkdir -p "$run_dir"
      if ! "$sim_bin" --config "$cfg" "${sets[@]}" "${overrides[@]}" --set "name=$name" \
          --workers "$workers" --run-dir "$run_dir" >"$run_dir/sim.out" 2>&1; then
        tail -n 5 "$run_dir/sim.out" >&2
        echo "sweep.sh: $name failed (log: $run_dir/sim.out)" >&2
        exit 1
      fi
    else
      log=$out/$name.run.log
      BUILD_DIR=$BUILD_DIR scripts/run.sh "$cfg" "${sets[@]}" "${overrides[@]}" --set "name=$name" \
        --workers "$workers" 2>&1 | tee "$log" | grep -E '^(==|run\.sh)' || true
      run_dir=$(sed -n 's/^== .* -> \(.*\) ([0-9]* workers)$/\1/p' "$log" | tail -n 1)
      [[ -n "$run_dir" ]] || { echo "sweep.sh: scripts/run.sh did not start $name (log: $log)" >&2; exit 1; }
    fi
    s=$run_dir/summary.json
    [[ -f "$s" ]] || { echo "sweep.sh: $s missing" >&2; exit 1; }
    {
      printf '%s,%s' "$name" "$method"
      for v in "${values[@]}"; do printf ',%s' "$v"; done
      for f in "${fields[@]}"; do printf ',%s' "$(field "$s" "$f")"; done
      printf ',%s,%s\n' "$mode" "$run_dir"
    } >>"$csv"
    printf '   test_acc %s, %s B up / %s B down per step, %s ms per step, %s s\n' \
      "$(field "$s" test_acc)" "$(field "$s" bytes_up_per_step)" \
      "$(field "$s" bytes_down_per_step)" "$(field "$s" step_ms)" "$(field "$s" wall_s)"
  done
done

# Plots: one bar (group) per run, in CSV order.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ng=${#grid_keys[@]}
# name test_acc up down compute encode network decode wait other wall (whitespace-separated)
awk -F, -v ng="$ng" 'NR > 1 {
    o = 2 + ng
    acc = $(o+1); up = $(o+2); dn = $(o+3); step = $(o+6); comp = $(o+7); enc = $(o+8)
    net = $(o+9); dec = $(o+10); wait = $(o+11); wall = $(o+12)
    other = step - comp - enc - net - dec - wait; if (other < 0) other = 0
    print $1, acc, up, dn, comp, enc, net, dec, wait, other, wall }' "$csv" >"$tmp/runs.dat"
n=$(wc -l <"$tmp/runs.dat")
width=$((600 + 60 * n))
gnuplot <<GP
set terminal pngcairo size $width,600 noenhanced
set datafile separator whitespace
set grid ytics
set style data histograms
set style fill solid 0.8 border -1
set boxwidth 0.8
set xtics rotate by -35 left
set bmargin 9
set key top left
set output '$out/accuracy.png'
set title 'test accuracy ($mode, $workers workers)'
set ylabel 'test accuracy'
set yrange [0:1]
plot '$tmp/runs.dat' using 2:xtic(1) notitle
set autoscale y
set output '$out/time.png'
set title 'time per step: compute vs communication ($mode)'
set ylabel 'ms per step'
set style histogram rowstacked
set key outside right top
plot '$tmp/runs.dat' using 5:xtic(1) title 'compute', '' using 6 title 'encode', \
     '' using 7 title 'network', '' using 8 title 'decode', '' using 9 title 'wait', \
     '' using 10 title 'other (server)'
set output '$out/bytes.png'
set title 'payload bytes per worker per step (log scale)'
set ylabel 'bytes per step'
set style histogram clustered gap 1
set logscale y
set key top right inside
plot '$tmp/runs.dat' using 3:xtic(1) title 'up (push)', '' using 4 title 'down (pull)'
unset logscale y
set output '$out/total_time.png'
set title 'total time ($mode)'
set ylabel 'wall seconds'; set yrange [0:*]
plot '$tmp/runs.dat' using 11:xtic(1) notitle
set terminal pngcairo size $((width * 2)),1200 noenhanced
set output '$out/results.png'
set multiplot layout 2,2 title 'gradpress sweep: $out ($mode, $workers workers)'
set style histogram clustered gap 1
set title 'test accuracy'; set ylabel 'test accuracy'; set yrange [0:1]; set key top left
plot '$tmp/runs.dat' using 2:xtic(1) notitle
set autoscale y
set title 'time per step'; set ylabel 'ms per step'; set style histogram rowstacked
set key outside right top
plot '$tmp/runs.dat' using 5:xtic(1) title 'compute', '' using 6 title 'encode', \
     '' using 7 title 'network', '' using 8 title 'decode', '' using 9 title 'wait', \
     '' using 10 title 'other (server)'
set title 'payload bytes per worker per step'; set ylabel 'bytes (log scale)'
set style histogram clustered gap 1; set logscale y; set key top right inside
plot '$tmp/runs.dat' using 3:xtic(1) title 'up', '' using 4 title 'down'
unset logscale y
set title 'total time'; set ylabel 'wall seconds'; set yrange [0:*]
plot '$tmp/runs.dat' using 11:xtic(1) notitle
unset multiplot
GP
echo "sweep.sh: $i runs; wrote $csv and $out/{accuracy,time,bytes,total_time,results}.png"
