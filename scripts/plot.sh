#!/usr/bin/env bash
# PNG plots of one or several runs side by side, from their metrics.jsonl (rank 0's lines):
# test accuracy against step and against bytes sent, and training loss against step.
#
#   scripts/plot.sh runs/lenet-fmnist-m1/<ts> runs/lenet-fmnist-m5/<ts>   # -> runs/plots/*.png
#   OUT=/tmp/p scripts/plot.sh RUN_DIR...
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: scripts/plot.sh RUN_DIR..." >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "plot.sh: gnuplot missing (scripts/setup.sh installs it)" >&2; exit 1; }
out=${OUT:-runs/plots}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

steps_plot=() ; acc_step_plot=() ; acc_bytes_plot=()
i=0
for d in "$@"; do
  m=$d/metrics.jsonl
  [[ -f "$m" ]] || { echo "plot.sh: $m not found" >&2; exit 1; }
  label=$(basename "$(dirname "$d")")
  # step, loss (rank 0); step, cumulative payload bytes (this worker, both directions),
  # test_acc (rank 0, per epoch). Read with python3's json module (scripts/json_field.py).
  python3 "$(dirname "$0")/json_field.py" --rows "$m" step loss >"$tmp/loss$i.dat"
  python3 "$(dirname "$0")/json_field.py" --rows "$m" step bytes_total test_acc >"$tmp/acc$i.dat"
  [[ -s "$tmp/loss$i.dat" ]] || { echo "plot.sh: no rank-0 step lines in $m" >&2; exit 1; }
  steps_plot+=("'$tmp/loss$i.dat' using 1:2 with lines title '$label'")
  acc_step_plot+=("'$tmp/acc$i.dat' using 1:3 with linespoints title '$label'")
  acc_bytes_plot+=("'$tmp/acc$i.dat' using (\$2/1e6):3 with linespoints title '$label'")
  i=$((i + 1))
done
join() { local IFS=","; echo "$*"; }
gnuplot <<GP
set terminal pngcairo size 900,600
set grid
set key bottom right
set output '$out/test_acc_vs_step.png'
set xlabel 'step'; set ylabel 'test accuracy'
plot $(join "${acc_step_plot[@]}")
set output '$out/test_acc_vs_bytes.png'
set logscale x
set xlabel 'payload MB sent and received by one worker (log scale)'
plot $(join "${acc_bytes_plot[@]}")
unset logscale x
set key top right
set output '$out/loss_vs_step.png'
set xlabel 'step'; set ylabel 'training loss (worker 0, per step)'
plot $(join "${steps_plot[@]}")
GP
echo "plot.sh: wrote $out/test_acc_vs_step.png, $out/test_acc_vs_bytes.png, $out/loss_vs_step.png"
