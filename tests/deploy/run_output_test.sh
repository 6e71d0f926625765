#!/usr/bin/env bash
# scripts/run.sh puts a run under <output.dir>/<name>/ of the resolved config (file + --set),
# and refuses a bad --set before starting anything, exit 2, naming the key; run.sh --table
# reads summary.json as JSON (any key order and spacing) and plot.sh plots the run.
# Usage: run_output_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$src"
BUILD_DIR=$build bash scripts/run.sh configs/lenet_fmnist_m1.yaml --set "output.dir=$out/runs" \
  --set name=output-check --set dataset.subset=256 --set dataset.test_subset=128 \
  --set train.epochs=1 >"$out/log" 2>&1 || { cat "$out/log"; exit 1; }
summary=$(ls "$out"/runs/output-check/*/summary.json)
python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); assert s["name"] == "output-check", s' "$summary"
# The table reads JSON, not a layout: sorted keys, no spaces, a name with a comma and quotes.
python3 -c 'import json, sys; p = sys.argv[1]; s = json.load(open(p)); s["test_acc"] = 0.4321
s["name"] = "check, \"q\""
json.dump(s, open(p, "w"), sort_keys=True, separators=(",", ":"))' "$summary"
bash scripts/run.sh --table "$(dirname "$summary")" >"$out/table" 2>&1
grep -Eq '^check, "q" +0\.4321 ' "$out/table" || { echo "run.sh --table:"; cat "$out/table"; exit 1; }
# plot.sh reads the same run's metrics.jsonl (json_field.py --rows) into its three PNGs.
OUT=$out/plots bash scripts/plot.sh "$(dirname "$summary")" >"$out/plot.log" 2>&1 || { cat "$out/plot.log"; exit 1; }
for png in test_acc_vs_step test_acc_vs_bytes loss_vs_step; do
  [[ -s "$out/plots/$png.png" ]] || { echo "plot.sh wrote no $png.png"; cat "$out/plot.log"; exit 1; }
done
rc=0
BUILD_DIR=$build bash scripts/run.sh configs/lenet_fmnist_m1.yaml --set "output.dir=$out/bad" \
  --set train.lr=abc >"$out/bad.log" 2>&1 || rc=$?
[[ $rc -eq 2 ]] || { echo "bad --set: exit $rc, expected 2"; cat "$out/bad.log"; exit 1; }
grep -q "train.lr" "$out/bad.log" || { echo "bad --set: the error does not name train.lr"; exit 1; }
[[ ! -e "$out/bad" ]] || { echo "bad --set: a run directory was created"; exit 1; }
echo "run_output_test: run in $(dirname "$summary"); bad --set refused"
