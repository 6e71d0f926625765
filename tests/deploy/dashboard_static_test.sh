#!/usr/bin/env bash
# scripts/dashboard.sh end to end: fabricates a run directory whose metrics.jsonl has 2 workers x
# N steps (rank 0 in the old format without step_ms, one of its rows late and out of order),
# epoch rows, a warm-up density row, a codec change (its reason holds '</script>', '&' and a
# backslash), a rejoin after which rank 1 re-runs three steps, server event rows, an unknown row,
# a blank line and a truncated line. Loads the HTML in headless Chromium and checks, from the
# dumped DOM, every chart's data-points against what the rows imply, the #gp-status hooks, the
# worker table, the events list and the job name; then takes a 1400x2000 screenshot and checks
# it is a non-trivial PNG. Also: dashboard.sh's errors for a missing metrics.jsonl and a
# missing Chart.js, and a 12000-step run whose lines are capped at 5000 points. The screenshot
# goes to $OUT when set (else a temp dir, removed on success).
# Usage: dashboard_static_test.sh SOURCE_DIR
set -euo pipefail
src=$(cd "${1:?usage: dashboard_static_test.sh SOURCE_DIR}" && pwd)
dash=$src/scripts/dashboard.sh
work=$(mktemp -d)
ok=0
cleanup() { if [[ $ok == 1 ]]; then rm -rf "$work"; else echo "dashboard_static_test: files kept in $work" >&2; fi; }
trap cleanup EXIT
fail() { echo "dashboard_static_test: FAIL: $*" >&2; exit 1; }

chromium=$(command -v chromium || command -v chromium-browser || true)
[[ -n $chromium ]] || fail "chromium not found (apt-get install chromium)"
[[ -f /usr/share/javascript/chart.js/chart.min.js || -n ${GP_CHARTJS:-} ]] ||
  fail "Chart.js not found (apt-get install libjs-chart.js)"

# ---- The run directory -----------------------------------------------------------------------
N=40            # steps per worker
job='tiny-job&1'
run=$work/$job
mkdir -p "$run"
m=$run/metrics.jsonl
rows=0          # JSON objects written (what data-rows must say)
emit() { printf '%s\n' "$1" >>"$m"; rows=$((rows + 1)); }
step_row() {    # rank step loss; rank 0 writes the old format, without step_ms
  local j="{\"rank\": $1, \"step\": $2, \"loss\": $3, \"bytes_up\": 1000, \"bytes_down\": 3000,"
  j+=' "compute_ms": 12.0, "encode_ms": 2.0, "decode_ms": 1.0, "network_ms": 4.0, "wait_ms": 1.5,'
  if [[ $1 == 1 ]]; then j+=' "step_ms": 21.5,'; fi
  emit "$j \"server_ms\": 3.0, \"exposed_comm_ms\": 5.0, \"overlap\": false}"
}
loss() { awk -v s="$1" -v r="$2" 'BEGIN { printf "%.4f", 2.3 * exp(-s / 15) + 0.1 * r }'; }
epoch_row() {   # rank epoch step
  local j="{\"rank\": $1, \"epoch\": $2, \"step\": $3, \"bytes_total\": $(($3 * 4000)),"
  emit "$j \"train_acc\": 0.$((50 + $2 * 10)), \"test_acc\": 0.$((45 + $2 * 10 + $1 * 3)), \"epoch_s\": 1.5}"
}
codec_row() {   # rank; the reason holds '</script>', '&' and a backslash (JSON: \\)
  local j="{\"rank\": $1, \"epoch\": 2, \"step\": 20, \"push_codec\": \"topk ratio=0.01\", \"rung\": 1,"
  emit "$j \"reason\": \"plateau </script><b>x & y \\\\ z\"}"
}

for r in 0 1; do emit "{\"rank\": $r, \"epoch\": 0, \"step\": 0, \"push_density\": 0.25}"; done
for ((s = 0; s < N; s++)); do
  [[ $s == 5 ]] || step_row 0 "$s" "$(loss "$s" 0)"      # step 5 comes last, out of order
  if [[ $s == 20 ]]; then codec_row 0; fi
  if (( (s + 1) % 10 == 0 )); then epoch_row 0 $(((s + 1) / 10)) $((s + 1)); fi
done
printf '\n' >>"$m"                                        # blank: ignored, not counted
for ((s = 0; s < 25; s++)); do                            # 22..24 are superseded: 9.9
  if ((s < 22)); then step_row 1 "$s" "$(loss "$s" 1)"; else step_row 1 "$s" 9.9; fi
done
emit '{"event": "dropped", "worker": "worker-1", "step": 24}'
emit '{"event": "registered", "worker": "worker-1", "step": 22}'
emit '{"rank": 1, "step": 22, "event": "rejoin", "steps_lost": 3}'
for ((s = 22; s < N; s++)); do
  step_row 1 "$s" "$(loss "$s" 1)"
  if (( (s + 1) % 10 == 0 )); then epoch_row 1 $(((s + 1) / 10)) $((s + 1)); fi
done
codec_row 1                                               # same step and codec: one marker
for e in 1 2; do epoch_row 1 $e $((e * 10)); done         # rank 1's first two epochs, late
emit '{"rank": 0, "note": "an unknown row kind"}'
step_row 0 5 "$(loss 5 0)"
printf '{"rank": 0, "step": 40, "loss"\n' >>"$m"          # truncated: skipped
ep_rows=8 markers=3 workers=2

# ---- dashboard.sh errors -----------------------------------------------------------------------
mkdir -p "$work/empty"
if "$dash" "$work/empty" >"$work/out" 2>"$work/err"; then fail "dashboard.sh accepted a run dir without metrics.jsonl"; fi
grep -q 'metrics.jsonl not found' "$work/err" || fail "dashboard.sh's error for a missing metrics.jsonl: $(cat "$work/err")"
if GP_CHARTJS=$work/none.js "$dash" "$run" >"$work/out" 2>"$work/err"; then fail "dashboard.sh ran without Chart.js"; fi
grep -q 'apt-get install libjs-chart.js' "$work/err" || fail "dashboard.sh's error for a missing Chart.js: $(cat "$work/err")"
[[ ! -e $run/dashboard.html ]] || fail "dashboard.sh left $run/dashboard.html after an error"

# ---- The page ----------------------------------------------------------------------------------
"$dash" "$run" >"$work/out" 2>"$work/err" || fail "dashboard.sh failed: $(cat "$work/err")"
html=$run/dashboard.html
[[ $(cat "$work/out") == "$html" ]] || fail "dashboard.sh printed '$(cat "$work/out")', not $html"
[[ -s $html ]] || fail "dashboard.sh wrote no $html"
! grep -qE '(src|href)="(https?:)?//' "$html" || fail "$html loads something from the network"
if grep -qxE '<!-- GP:[A-Z]+ -->' "$html"; then fail "$html still holds a GP: marker line"; fi
[[ $(grep -c '^<script id="gp-rows"' "$html") == 1 ]] || fail "$html has no single gp-rows block"

chrome() { timeout 90 "$chromium" --headless --no-sandbox --disable-gpu --user-data-dir="$work/profile" \
  --virtual-time-budget=5000 "$@" 2>>"$work/chromium.log"; }
url="file://$(printf '%s' "$html" | sed 's/&/%26/g')"
chrome --dump-dom "$url" >"$work/dom.html" || fail "chromium --dump-dom failed (see $work/chromium.log)"
[[ -s $work/dom.html ]] || fail "chromium dumped an empty DOM"

attr() {        # attr ELEMENT_ID NAME: the attribute's value in the dumped DOM
  grep -o "<[a-z]* id=\"$1\"[^>]*>" "$work/dom.html" | head -1 | sed -n "s/.* $2=\"\\([^\"]*\\)\".*/\\1/p"
}
expect() {      # expect ELEMENT_ID NAME VALUE WHY
  local got
  got=$(attr "$1" "$2")
  [[ $got == "$3" ]] || fail "#$1 $2=\"$got\", expected \"$3\" ($4)"
}
expect gp-status data-mode static "no #gp-rows read"
expect gp-status data-renders 1 "a static page renders once"
expect gp-status data-rows "$rows" "JSON rows in metrics.jsonl"
expect gp-status data-skipped 1 "one truncated line"
expect gp-status data-steps $((2 * N)) "distinct (rank, step) step rows"
expect gp-status data-markers $markers "density 0.25, topk ratio=0.01, w1 rejoin"
expect chart-loss-step data-points $((2 * N)) "a loss point per step row"
expect chart-steptime data-points $((2 * N)) "a step-time point per step row"
expect chart-loss-bytes data-points $((2 * N)) "a loss point per step row"
expect chart-bytes data-points $((3 * N)) "up, down and running total per distinct step"
expect chart-acc-step data-points $ep_rows "an accuracy point per epoch row"
expect chart-acc-bytes data-points $ep_rows "an accuracy point per epoch row"
expect chart-phases data-points $((workers * 5)) "workers x 5 phases"

grep -q '<tr data-worker="worker-0" data-state="finished"' "$work/dom.html" || fail "worker table: no finished worker-0"
grep -q '<tr data-worker="worker-1" data-state="rejoined"' "$work/dom.html" || fail "worker table: no rejoined worker-1"
[[ $(grep -o '<tr data-worker=' "$work/dom.html" | wc -l) == "$workers" ]] || fail "worker table: not $workers rows"
grep -q '<h1 id="gp-job">tiny-job&amp;1</h1>' "$work/dom.html" || fail "header: job name $job not shown"
grep -q '<li data-kind="codec">[^<]*topk ratio=0.01' "$work/dom.html" || fail "events: codec change marker missing"
grep -qF 'plateau &lt;/script&gt;&lt;b&gt;x &amp; y \ z' "$work/dom.html" ||
  fail "events: the codec reason did not come through verbatim"
grep -q '<li data-kind="density">[^<]*push density 0.25' "$work/dom.html" || fail "events: density marker missing"
grep -q '<li data-kind="rejoin">[^<]*rank 1: rejoined at step 22' "$work/dom.html" || fail "events: rejoin missing"
grep -q '<li data-kind="server">[^<]*worker-1 dropped' "$work/dom.html" || fail "events: server event missing"
if grep -q 'id="gp-status"[^>]*class="error"' "$work/dom.html"; then fail "status line shows an error"; fi

# ---- A long run: each line is capped at 5000 points -------------------------------------------
long=$work/long
mkdir -p "$long"
row='{"rank": 0, "step": %d, "loss": %.4f, "bytes_up": 10, "bytes_down": 30, "compute_ms": 5,'
row+=' "encode_ms": 1, "decode_ms": 1, "network_ms": 2, "wait_ms": 0, "step_ms": 9}\n'
awk -v row="$row" 'BEGIN { for (s = 0; s < 12000; s++) printf row, s, 3 / (1 + s / 500) }' >"$long/metrics.jsonl"
"$dash" "$long" >/dev/null 2>"$work/err" || fail "dashboard.sh failed on the long run: $(cat "$work/err")"
chrome --dump-dom "file://$long/dashboard.html" >"$work/dom.html" || fail "chromium --dump-dom failed on the long run"
expect gp-status data-steps 12000 "12000 step rows in the long run"
pts=$(attr chart-loss-step data-points)
(( ${pts:-0} > 4000 && ${pts:-0} <= 5000 )) || fail "long run: chart-loss-step has ${pts:-no} points, expected 4001..5000"
expect chart-steptime data-points "$pts" "the same steps kept as chart-loss-step"
expect chart-bytes data-points $((3 * pts)) "three lines over the same kept steps"

# ---- Screenshot --------------------------------------------------------------------------------
shots=${OUT:-$work}
mkdir -p "$shots"
png=$shots/dashboard_static.png
rm -f "$png"
(cd "$work" && chrome --screenshot="$png" --window-size=1400,2000 --hide-scrollbars "$url" >/dev/null) ||
  fail "chromium --screenshot failed (see $work/chromium.log)"
[[ -s $png ]] || fail "screenshot $png is missing or empty"
[[ $(head -c 8 "$png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || fail "screenshot $png is not a PNG"
size=$(wc -c <"$png")
# A blank 1400x2000 page compresses to a few KB; eight drawn charts take far more.
(( size > 40000 )) || fail "screenshot $png is only $size bytes: the charts did not draw"
ok=1
kept=$png; [[ -n ${OUT:-} ]] || kept="removed; set OUT=DIR to keep it"
echo "dashboard_static_test: OK ($rows rows, $((2 * N)) step rows, screenshot $size bytes: $kept)"
