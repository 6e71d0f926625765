#!/usr/bin/env bash
# scripts/sweep.sh in sim mode on a tiny synthetic config: 2 configs x a 2-point grid = 4
# runs; checks results.csv's header and rows and that every PNG was written.
set -euo pipefail
sim_bin=$1
repo=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat >"$tmp/m3.yaml" <<'YAML'
name: tiny-m3
model: lenet
dataset: {name: synthetic, subset: 256, test_subset: 64}
device: cpu
train: {epochs: 1, batch_size: 32, lr: 0.05, momentum: 0.9, seed: 5, log_every: 0}
sync: {mode: sync, exchange: gradients}
server: {stats_every: 0}
YAML
sed -e 's/tiny-m3/tiny-m5/' "$tmp/m3.yaml" >"$tmp/m5.yaml"
cat >>"$tmp/m5.yaml" <<'YAML'
push: {codec: topk, ratio: 0.01, then: {codec: qsgd, levels: 16}, error_feedback: true}
pull: {codec: topk, ratio: 0.01, then: {codec: qsgd, levels: 16}, error_feedback: true}
compress: {min_numel: 100}
YAML

SIM_BIN=$sim_bin bash "$repo/scripts/sweep.sh" --mode sim --out "$tmp/sweep" --workers 2 \
  --grid train.lr=0.05,0.1 --set train.momentum=0.8 "$tmp/m3.yaml" "$tmp/m5.yaml" >"$tmp/log" 2>&1 ||
  { cat "$tmp/log"; echo "sweep.sh failed"; exit 1; }

csv=$tmp/sweep/results.csv
expected='name,method,train.lr,test_acc,bytes_up_per_step,bytes_down_per_step,ratio_up,ratio_down,step_ms,compute_ms,encode_ms,network_ms,decode_ms,wait_ms,wall_s,mode,run_dir'
[[ "$(head -n 1 "$csv")" == "$expected" ]] || { echo "header: $(head -n 1 "$csv")"; exit 1; }
[[ $(tail -n +2 "$csv" | wc -l) -eq 4 ]] || { cat "$csv"; echo "expected 4 rows"; exit 1; }
cols=$(awk -F, '{print NF}' "$csv" | sort -u)
[[ "$cols" == 17 ]] || { cat "$csv"; echo "rows of unequal width: $cols"; exit 1; }
grep -q '^tiny-m3_lr0.05,tiny-m3,0.05,' "$csv" || { cat "$csv"; echo "no tiny-m3_lr0.05 row"; exit 1; }
grep -q '^tiny-m5_lr0.1,tiny-m5,0.1,' "$csv" || { cat "$csv"; echo "no tiny-m5_lr0.1 row"; exit 1; }
# Numbers everywhere, and method 5 sends far fewer bytes than method 3.
awk -F, 'NR > 1 { for (i = 3; i <= 15; i++) if ($i !~ /^[0-9.e+-]+$/) { print "not a number: " $0; exit 1 } }' "$csv"
m3_up=$(awk -F, '$2 == "tiny-m3" {print $5; exit}' "$csv")
m5_up=$(awk -F, '$2 == "tiny-m5" {print $5; exit}' "$csv")
awk -v a="$m3_up" -v b="$m5_up" 'BEGIN { exit !(b * 10 < a) }' ||
  { cat "$csv"; echo "method 5 bytes $m5_up not far below method 3's $m3_up"; exit 1; }
# The momentum override reached every run's resolved config.
for d in "$tmp"/sweep/runs/*/; do
  grep -q 'momentum: 0.8' "$d/config.yaml" || { echo "no --set in $d/config.yaml"; exit 1; }
  grep -q '"rank": 1' "$d/metrics.jsonl" || { echo "no rank-1 lines in $d/metrics.jsonl"; exit 1; }
done
for png in accuracy time bytes total_time results; do
  f=$tmp/sweep/$png.png
  [[ -s "$f" ]] || { echo "$f missing"; exit 1; }
  [[ "$(head -c 4 "$f" | tail -c 3)" == PNG ]] || { echo "$f is not a PNG"; exit 1; }
done
# A bad mode is refused.
if bash "$repo/scripts/sweep.sh" --mode nope "$tmp/m3.yaml" >/dev/null 2>&1; then
  echo "--mode nope accepted"; exit 1
fi
echo "sweep_test: ok"
