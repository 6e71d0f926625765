#!/usr/bin/env bash
# The experiment report: methods 1-6 on one model at one emulated link speed (through
# scripts/netem.sh), then report.md with the table and PNG plots (gnuplot).
#
#   scripts/report.sh --model lenet --rate 1gbit --max-steps 200
#   scripts/report.sh --model vgg11 --rate 100mbit --max-steps 6 --set train.batch_size=16
#   scripts/report.sh --model vgg11 --methods "1 5" --rate 100mbit --max-steps 6
#   scripts/report.sh --from DIR              # rewrite DIR/report.md from the runs it lists
#
# Options: --model lenet|vgg11 (LeNet-5 on Fashion-MNIST, VGG11-BN on CIFAR-10), --rate R
# (netem.sh's tc rate, "none" = uncapped), --methods "1 2 3 4 5 6", --workers N (2),
# --max-steps K (each worker stops after K steps; the time per step is the mean over them),
# --delay-ms / --jitter-ms / --reset-prob (the fault proxy, see netem.sh), --set k=v (to
# every run, e.g. train.epochs=1, dataset.subset=4096, train.batch_size=32), --out DIR
# (default runs/report/<model>-<rate>-<timestamp>).
#
# Data: when Fashion-MNIST is not in /usr/share/datasets/fashion-mnist, LeNet runs on
# gradpress's synthetic set; when CIFAR-10 is not in data/cifar-10-batches-bin, VGG11 runs on
# synthetic CIFAR-shaped data (scripts/synth_cifar.py, 3x32x32, in the CIFAR-10 binary format:
# the built-in synthetic set is 1x28x28, which VGG11 refuses). report.md says which was used;
# accuracy on synthetic data says nothing about the real data set, bytes and times do.
#
# Baselines (compression rarely beats a well-tuned uncompressed baseline): with method 1 in
# --methods, the report also runs method 1 with fp16 both ways and sync.overlap on ("m1-fp16"),
# next to method 1 itself (overlap on by default); --no-baselines skips it.
#
# Writes DIR/report.md, DIR/table.txt (scripts/run.sh --table), DIR/runs.txt (the run
# directories), DIR/time_per_step.png (stacked: compute / compression / network / wait /
# other), DIR/bytes_per_step.png, DIR/accuracy.png, and scripts/plot.sh's curves in DIR/curves/.
set -euo pipefail
cd "$(dirname "$0")/.."
args="$*"

model=lenet
rate=100mbit
methods="1 2 3 4 5 6"
workers=2
max_steps=""
out=""
from=""
baselines=1
sets=()
fault=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --methods) methods=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --max-steps) max_steps=$2; shift 2 ;;
    --delay-ms|--jitter-ms|--reset-prob) fault+=("$1" "$2"); shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-baselines) baselines=0; shift ;;
    --from) from=${2%/}; shift 2 ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) echo "report.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
command -v gnuplot >/dev/null || { echo "report.sh: gnuplot missing (scripts/setup.sh installs it)" >&2; exit 1; }

if [[ -n "$from" ]]; then
  out=$from
  [[ -f "$out/runs.txt" ]] || { echo "report.sh: $out/runs.txt missing" >&2; exit 2; }
else
  case "$model" in
    lenet) prefix=configs/lenet_fmnist_m ;;
    vgg11) prefix=configs/vgg11_cifar10_m ;;
    *) echo "report.sh: --model is lenet or vgg11" >&2; exit 2 ;;
  esac
  data_sets=()
  data_note=""
  if [[ $model == lenet && ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte &&
        ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]]; then
    data_sets=(--set dataset.name=synthetic)
    data_note="Fashion-MNIST not found: gradpress's synthetic 1x28x28 set"
  fi
  if [[ $model == vgg11 && ! -f data/cifar-10-batches-bin/data_batch_1.bin ]]; then
    synth=runs/data/synthetic-cifar
    [[ -f $synth/test_batch.bin ]] || python3 scripts/synth_cifar.py "$synth" --train 5000 --test 500 >&2
    data_sets=(--set dataset.name=cifar10 --set "dataset.path=$synth")
    data_note="CIFAR-10 not found: synthetic CIFAR-shaped data (scripts/synth_cifar.py, $synth)"
  fi
  cfgs=()
  for m in $methods; do
    [[ -f $prefix$m.yaml ]] || { echo "report.sh: no $prefix$m.yaml" >&2; exit 2; }
    cfgs+=("$prefix$m.yaml")
  done
  out=${out:-runs/report/$model-$rate-$(date +%Y%m%d-%H%M%S)}
  mkdir -p "$out"
  if [[ $baselines -eq 1 && " $methods " == *" 1 "* ]]; then
    # Method 1 with fp16 both ways and overlap, written next to the report (the command
    # line's --set's apply to it too, as to every run).
    python3 - "${prefix}1.yaml" "$out/baseline-m1-fp16.yaml" <<'PY'
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
c["name"] = c["name"] + "-fp16"
c["push"] = {"codec": "fp16"}
c["pull"] = {"codec": "fp16"}
c.setdefault("sync", {})["overlap"] = True
yaml.safe_dump(c, open(sys.argv[2], "w"), sort_keys=False)
PY
    cfgs+=("$out/baseline-m1-fp16.yaml")
  fi
  : >"$out/runs.txt"
  steps_arg=()
  [[ -n "$max_steps" ]] && steps_arg=(--max-steps "$max_steps")
  {
    echo "command: scripts/report.sh $args"
    echo "rate: $rate"
    echo "data: ${data_note:-as in the configs}"
    echo "netem: scripts/netem.sh --rate $rate --workers $workers ${steps_arg[*]} ${fault[*]} ${data_sets[*]} ${sets[*]} ${cfgs[*]}"
  } >"$out/settings.txt"
  bash scripts/netem.sh --rate "$rate" --workers "$workers" "${steps_arg[@]}" "${fault[@]}" \
    --runs-file "$out/runs.txt" "${data_sets[@]}" "${sets[@]}" "${cfgs[@]}"
fi

mapfile -t runs <"$out/runs.txt"
[[ ${#runs[@]} -gt 0 ]] || { echo "report.sh: no finished runs in $out/runs.txt" >&2; exit 1; }
bash scripts/run.sh --table "${runs[@]}" >"$out/table.txt"

# report.md and the plot data, from each run's summary.json and link.txt.
python3 - "$out" "${runs[@]}" <<'PY'
import json, os, re, sys
out, runs = sys.argv[1], sys.argv[2:]
settings = open(os.path.join(out, "settings.txt")).read() if os.path.exists(os.path.join(out, "settings.txt")) else ""
rows = []
for d in runs:
    s = json.load(open(os.path.join(d, "summary.json")))
    link = {}
    if os.path.exists(os.path.join(d, "link.txt")):
        for line in open(os.path.join(d, "link.txt")):
            k, _, v = line.partition(":"); link[k.strip()] = v.strip()
    m = re.search(r"-m(\d+)$", s["name"])
    s["label"] = f"m{m.group(1)}" if m else s["name"]
    s["compress_ms"] = s["encode_ms"] + s["decode_ms"]
    s["other_ms"] = max(0.0, s["step_ms"] - s["compute_ms"] - s["compress_ms"] - s["network_ms"] - s["wait_ms"])
    s.setdefault("exposed_comm_ms", float("nan")); s.setdefault("overlap", None)
    s["link"] = link; s["dir"] = d
    rows.append(s)
base = next((r for r in rows if r["label"] == "m1"), None)
with open(os.path.join(out, "plot.dat"), "w") as f:
    f.write("# label compute compress network wait other bytes_up bytes_down test_acc\n")
    for r in rows:
        f.write(f'{r["label"]} {r["compute_ms"]:.3f} {r["compress_ms"]:.3f} {r["network_ms"]:.3f} '
                f'{r["wait_ms"]:.3f} {r["other_ms"]:.3f} {max(r["bytes_up_per_step"], 1)} '
                f'{max(r["bytes_down_per_step"], 1)} {r["test_acc"]:.4f}\n')
L = []
r0 = rows[0]
L.append(f'# gradpress experiment report: {r0["model"]}, {r0["link"].get("rate", "?")} links\n')
L.append(f'{r0["workers"]} workers, each on its own emulated link of {r0["link"].get("rate", "?")} per direction '
         f'to the server (scripts/netem.sh: network namespaces, veth, tc tbf); fault proxy: delay '
         f'{r0["link"].get("delay_ms", "0")} ms, jitter {r0["link"].get("jitter_ms", "0")} ms, reset probability '
         f'{r0["link"].get("reset_prob", "0")}; max steps per worker: {r0["link"].get("max_steps", "?")}; '
         f'steps run: {r0["steps"]}; data set as reported by the runs: {r0["dataset"]}.\n')
if settings:
    L.append("```\n" + settings.strip() + "\n```\n")
L.append("Times are means per step of one worker, in ms; compression = encode + decode; other = "
         "step minus the named parts. Bytes are payload bytes per worker per step. `vs m1` is the "
         "time per step over method 1's. With overlap (the pipelined step) the buckets' encode, "
         "network and wait times are summed over buckets that run at once and beside backward, "
         "so they can exceed the step; `exposed` is what the step waited for communication after "
         "backward ended.\n")
L.append("| method | overlap | test acc | bytes up/step | bytes down/step | ratio up | ratio down | step ms | vs m1 | compute | compression | network | wait | other | exposed | total s |")
L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    vs = f'{r["step_ms"] / base["step_ms"]:.3f}' if base else "-"
    ov = {True: "on", False: "off"}.get(r["overlap"], "-")
    L.append(f'| {r["label"]} ({r["name"]}) | {ov} | {r["test_acc"]:.4f} | {r["bytes_up_per_step"]:,.0f} | '
             f'{r["bytes_down_per_step"]:,.0f} | {r["ratio_up"]:.1f} | {r["ratio_down"]:.1f} | '
             f'{r["step_ms"]:.1f} | {vs} | {r["compute_ms"]:.1f} | {r["compress_ms"]:.1f} | '
             f'{r["network_ms"]:.1f} | {r["wait_ms"]:.1f} | {r["other_ms"]:.1f} | '
             f'{r["exposed_comm_ms"]:.1f} | {r["wall_s"]:.1f} |')
L.append("")
if base:
    fastest = min(rows, key=lambda r: r["step_ms"])
    slowest = max(rows, key=lambda r: r["step_ms"])
    L.append(f'Fastest step: {fastest["label"]}, {base["step_ms"] / fastest["step_ms"]:.2f}x shorter than m1. '
             f'Slowest: {slowest["label"]}, {slowest["step_ms"] / base["step_ms"]:.3f} of m1\'s.\n')
L.append("![time per step](time_per_step.png)\n")
L.append("![bytes per step](bytes_per_step.png)\n")
L.append("![test accuracy](accuracy.png)\n")
L.append("Curves per run (scripts/plot.sh): `curves/`. Runs: " + ", ".join(f'`{r["dir"]}`' for r in rows) + "\n")
open(os.path.join(out, "report.md"), "w").write("\n".join(L))
PY

gnuplot <<GP
set terminal pngcairo size 900,560
set grid ytics
set style data histograms
set style fill solid 0.85 border -1
set boxwidth 0.7
set key outside right top
set style histogram rowstacked
set output '$out/time_per_step.png'
set title 'time per step, split (ms, mean of one worker)'
set ylabel 'ms per step'
plot '$out/plot.dat' using 2:xtic(1) title 'compute', '' using 3 title 'compression', \
     '' using 4 title 'network', '' using 5 title 'wait', '' using 6 title 'other'
set style histogram clustered gap 1
set logscale y
set output '$out/bytes_per_step.png'
set title 'payload bytes per worker per step (log scale)'
set ylabel 'bytes'
plot '$out/plot.dat' using 7:xtic(1) title 'up (push)', '' using 8 title 'down (pull)'
unset logscale y
set yrange [0:1]
set output '$out/accuracy.png'
set title 'test accuracy at the end of the run'
set ylabel 'test accuracy'
plot '$out/plot.dat' using 9:xtic(1) title 'test acc'
GP
OUT=$out/curves bash scripts/plot.sh "${runs[@]}" >/dev/null 2>&1 ||
  echo "report.sh: scripts/plot.sh made no curves (runs too short for a test-accuracy line?)" >&2
cat "$out/table.txt"
echo "report.sh: wrote $out/report.md and $out/*.png"
