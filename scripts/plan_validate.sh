#!/usr/bin/env bash
# The planner against real runs (docs/planner.md): for each model and link rate, the
# predicted step of each method (gradpress-plan, calibrated here) beside the measured one
# (scripts/netem.sh, W workers with a link each, or the star topology), and the error.
#
#   scripts/plan_validate.sh                       # resnet20 and vgg11; 100mbit 1gbit none
#   scripts/plan_validate.sh --models vgg11 --rates "1gbit" --workers 4 --topology star
#
# Options: --models "resnet20 vgg11", --rates "100mbit 1gbit none" (tc rates; none = no cap,
# predicted at --uncapped-gbps, default 20), --workers W (2), --topology links|star (links),
# --steps K (measured steps per run, default 12; the first 2 are left out as warm-up),
# --out DIR. Methods: 1 (weights, codec none), 1 with fp16 both ways, 5 (top-k 1% + QSGD 16
# with error feedback both ways). Data: synthetic CIFAR-shaped (scripts/synth_cifar.py).
# With more workers than cores, the prediction's compute is scaled by workers / cores.
# Prints one line per point: model, rate, method, predicted, measured (median step of rank
# 0 after warm-up), error %. Needs root (network namespaces) like netem.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
models="resnet20 vgg11"
rates="100mbit 1gbit none"
workers=2
topology=links
steps=12
uncapped=20
out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --models) models=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --topology) topology=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --uncapped-gbps) uncapped=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "plan_validate.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
build=${BUILD_DIR:-build}
# Every worker runs on this machine: more workers than cores share them (the model's
# --compute-scale; the calibration times one worker alone).
scale=$(awk -v w="$workers" -v c="$(nproc)" 'BEGIN { print (w > c) ? w / c : 1 }')
plan=$build/plan/gradpress-plan
[[ -x $plan ]] || { echo "plan_validate.sh: build gradpress-plan first ($build)" >&2; exit 1; }
out=${out:-runs/plan-validate/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
synth=runs/data/synthetic-cifar
[[ -f $synth/test_batch.bin ]] || python3 scripts/synth_cifar.py "$synth" --train 5000 --test 500 >&2
m5="topk ratio=0.01 error_feedback=true then=qsgd levels=16"
declare -A codec=([m1]="{codec: none}" [m1fp16]="{codec: fp16}"
  [m5]="{codec: topk, ratio: 0.01, then: {codec: qsgd, levels: 16}, error_feedback: true}")
gbps() { case $1 in none) echo "$uncapped" ;; *gbit) echo "${1%gbit}" ;;
  *mbit) awk -v r="${1%mbit}" 'BEGIN { print r / 1000 }' ;; *) echo "plan_validate.sh: rate '$1'?" >&2; exit 2 ;; esac; }
printf "%-9s %-8s %-7s %10s %10s %8s\n" model rate method predicted measured error%
for model in $models; do
  case $model in
    resnet20) config=configs/resnet18_cifar10_m1.yaml; sets=(--set model=resnet20) ;;
    vgg11) config=configs/vgg11_cifar10_m1.yaml; sets=() ;;
    *) echo "plan_validate.sh: model '$model' is not resnet20 or vgg11" >&2; exit 2 ;;
  esac
  sets+=(--set dataset.name=cifar10 --set "dataset.path=$synth" --set train.threads=1
    --set compress.min_numel=0)
  # One calibration per model: the three methods share its compute profile.
  "$plan" --config "$config" "${sets[@]}" --methods "none;fp16;$m5" --steps 5 \
    --save "$out" --workers 1 >/dev/null
  for i in 1 2 3; do cp "$out/calibration-$i.yaml" "$out/$model-calibration-$i.yaml"; done
  for rate in $rates; do
    for m in m1 m1fp16 m5; do
      c=${codec[$m]}
      i=$([[ $m == m1 ]] && echo 1 || { [[ $m == m1fp16 ]] && echo 2 || echo 3; })
      predicted=$("$plan" --calibration "$out/$model-calibration-$i.yaml" --workers "$workers" \
        --topology "$topology" --compute-scale "$scale" \
        --rate-gbps "$(gbps "$rate")" --json | python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['step_ms'])")
      exchange=$([[ $m == m5 ]] && echo gradients || echo weights)
      runs_file=$out/runs-$model-$rate-$m
      rm -f "$runs_file"
      bash scripts/netem.sh --rate "$rate" --topology "$topology" --workers "$workers" "$config" \
        "${sets[@]}" --set "sync.exchange=$exchange" --set "push=$c" \
        --set "pull=$c" --max-steps "$steps" \
        --runs-root "$out/runs" --runs-file "$runs_file" >"$out/$model-$rate-$m.log" 2>&1 ||
        { echo "plan_validate.sh: the run failed, see $out/$model-$rate-$m.log" >&2; exit 1; }
      measured=$(python3 scripts/median_step.py "$(cat "$runs_file")" 2)
      python3 -c "import sys; p, m = float(sys.argv[4]), float(sys.argv[5]); print(f'{sys.argv[1]:<9} {sys.argv[2]:<8} {sys.argv[3]:<7} {p:10.1f} {m:10.1f} {100 * (p - m) / m:+8.1f}')" \
        "$model" "$rate" "$m" "$predicted" "$measured" | tee -a "$out/points.txt"
    done
  done
done
echo "plan_validate.sh: $out/points.txt" >&2
