#!/usr/bin/env bash
# gradpress against PyTorch DDP with torch's own compression hooks, on the same emulated links
# (docs/comparison.md): one training script (examples/torch_compare.py), the same seeds, data
# order, batch per worker, optimizer and lr in every run, one intra-op thread per worker. Each
# run is a star (scripts/netem.sh --topology star: every host, gradpress's server included,
# behind one link capped at RATE into a switch); DDP's ranks talk to each other over Gloo.
#
#   scripts/compare.sh                                   # the CNN's table (see defaults)
#   scripts/compare.sh --rates "100mbit" --workers 2 --methods "ddp-fp16 gp-m5" --rounds 1
#   scripts/compare.sh --workload vgg11 --steps 12       # VGG11, step time and bytes only
#   scripts/compare.sh --table DIR                       # the table (and plot) of DIR again
#
# Methods: ddp (no hook), ddp-fp16 (fp16_compress_hook), ddp-psgd1 / ddp-psgd4 (powerSGD_hook,
# rank 1 / 4, torch's error feedback and warm start, start_powerSGD_iter --psgd-start);
# gp-m1 (weights down, no codec: the survey's method 1), gp-m3 (averaged gradients both ways,
# no codec: the uncompressed parameter server), gp-fp16 (fp16 both ways), gp-m5 (top-k 1% then
# QSGD, error feedback, both ways), gp-auto (compress.auto: gradpress's planner picks per key).
# Options: --workload cnn|vgg11 (cnn: ResNet-8 on Fashion-MNIST to --target test accuracy;
# vgg11: seeded CIFAR-shaped data, step time only), --rates "100mbit 1gbit none" (tc rates;
# none: no cap), --workers "2 4", --methods "...", --rounds N (each round runs every cell once,
# the methods' order reversed every other round), --epochs N / --steps N (per run), --target A,
# --eval-every N, --lr X, --psgd-start N, --out DIR (default runs/compare/<timestamp>).
# Writes DIR/results.jsonl (one object per run: rate, round and examples/torch_compare.py's
# result: median step, bytes sent and received per worker per step from the interfaces'
# counters, final accuracy, time to target), DIR/table.txt and DIR/time_to_target.png
# (gnuplot, where installed). Needs root (network namespaces), gradpress-server and
# gradpress._C built (BUILD_DIR, default build).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/launch.sh

workload=cnn
rates="100mbit 1gbit none"
workers_list="2 4"
methods="ddp ddp-fp16 ddp-psgd1 ddp-psgd4 gp-m3 gp-fp16 gp-m5 gp-auto"
rounds=1
epochs=3
steps=0
target=0.88
eval_every=100
lr=0.05
psgd_start=100
out=""
table_only=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --workload) workload=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --workers) workers_list=$2; shift 2 ;;
    --methods) methods=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --target) target=$2; shift 2 ;;
    --eval-every) eval_every=$2; shift 2 ;;
    --lr) lr=$2; shift 2 ;;
    --psgd-start) psgd_start=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --table) table_only=$2; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "compare.sh: unknown option '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done

table() {  # table DIR: DIR/table.txt and the plot from DIR/results.jsonl
  /usr/bin/python3 scripts/lib/compare_table.py "$1"
}
if [[ -n $table_only ]]; then
  table "$table_only"
  exit 0
fi

build=${BUILD_DIR:-build}
[[ $workload == cnn || $workload == vgg11 ]] ||
  { echo "compare.sh: --workload is cnn or vgg11, not '$workload'" >&2; exit 2; }
for m in $methods; do
  case $m in
    ddp|ddp-fp16|ddp-psgd1|ddp-psgd4|gp-m1|gp-m3|gp-fp16|gp-m5|gp-auto) ;;
    *) echo "compare.sh: unknown method '$m' (--help lists them)" >&2; exit 2 ;;
  esac
done
if [[ $methods == *gp-* ]]; then
  [[ -x $build/server/gradpress-server && -n "$(ls "$build"/python/gradpress/_C*.so 2>/dev/null)" ]] ||
    { echo "compare.sh: build gradpress-server and gradpress._C first (cmake --build $build)" >&2; exit 2; }
fi
[[ $(id -u) -eq 0 ]] || { echo "compare.sh: needs root (scripts/netem.sh makes network namespaces)" >&2; exit 2; }
out=${out:-runs/compare/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
echo "compare.sh: results in $out/results.jsonl" >&2

length=(--epochs "$epochs")
[[ $steps -gt 0 ]] && length=(--epochs 1000 --max-steps "$steps")
common=(--workload "$workload" --lr "$lr" --target "$target" --eval-every "$eval_every"
        "${length[@]}")

for round in $(seq "$rounds"); do
  order=($methods)
  if (( round % 2 == 0 )); then  # alternate the order: drift in the machine hits both ends
    for ((i = 0, j = ${#order[@]} - 1; i < j; i++, j--)); do
      t=${order[i]}; order[i]=${order[j]}; order[j]=$t
    done
  fi
  for rate in $rates; do
    for w in $workers_list; do
      for m in "${order[@]}"; do
        dir=$out/runs/$m-$rate-w$w-r$round
        mkdir -p "$dir"
        echo "compare.sh: round $round, $rate, $w workers, $m" >&2
        if ! scripts/netem.sh --topology star --rate "$rate" --workers "$w" -- \
          bash scripts/lib/compare_run.sh "$m" "$dir" "$build" "$psgd_start" "${common[@]}" \
          >"$dir/netem.log" 2>&1; then
          echo "compare.sh: $m at $rate with $w workers failed; see $dir (netem.log, worker-*.log)" >&2
          continue
        fi
        /usr/bin/python3 - "$dir/result.json" "$rate" "$round" "$out/results.jsonl" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
r.update(rate=sys.argv[2], round=int(sys.argv[3]))
open(sys.argv[4], "a").write(json.dumps(r) + "\n")
EOF
      done
    done
  done
done
table "$out"
