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
  # step, loss (rank 0)
  grep -E '"rank": ?0,' "$m" | grep '"loss"' | awk -F'[:,}]' '{
      for (j = 1; j < NF; j++) { if ($j ~ /"step"/) s = $(j+1); if ($j ~ /"loss"/) l = $(j+1) }
      print s, l }' >"$tmp/loss$i.dat"
  # step, cumulative bytes (MB, this worker, both directions), test_acc (rank 0, per epoch)
  grep -E '"rank": ?0,' "$m" | grep '"test_acc"' | awk -F'[:,}]' '{
      for (j = 1; j < NF; j++) {
        if ($j ~ /"step"/) s = $(j+1); if ($j ~ /"bytes_total"/) b = $(j+1); if ($j ~ /"test_acc"/) a = $(j+1) }
      print s, b / 1e6, a }' >"$tmp/acc$i.dat"
  [[ -s "$tmp/loss$i.dat" ]] || { echo "plot.sh: no rank-0 step lines in $m" >&2; exit 1; }
  steps_plot+=("'$tmp/loss$i.dat' using 1:2 with lines title '$label'")
  acc_step_plot+=("'$tmp/acc$i.dat' using 1:3 with linespoints title '$label'")
  acc_bytes_plot+=("'$tmp/acc$i.dat' using 2:3 with linespoints title '$label'")
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
