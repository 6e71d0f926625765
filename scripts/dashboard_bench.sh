#!/usr/bin/env bash
# What the live dashboard costs the training job (issue 16): the main job (LeNet on
# Fashion-MNIST, method 5, one server and two workers, scripts/run.sh --dashboard) run in
# alternated rounds of three: nobody watching; "api": a client reading what the page reads
# (api/stream?since=N&workers=1, a line every second), as a browser on another machine costs
# the job; "browser": the page open in headless Chromium on this machine, refreshing every second,
# whose own rendering then shares the job's two cores. All three serve the page; only the
# viewer differs. Prints each run's mean step time in steady state (metrics.jsonl step_ms of
# both workers, steps from --skip on, so the viewer's start-up is not counted) and the
# dashboard requests the server answered (gradpress_dashboard_requests_total), then each
# viewer's ratio to nobody watching: the target is at most 1.02.
#
#   scripts/dashboard_bench.sh                      # 3 rounds, 2 epochs a run (about 5 minutes)
#   scripts/dashboard_bench.sh --rounds 5 --epochs 1 --skip 100
#
# --alternate W: the same run, alternated. One job (--epochs, 10 here unless given) per round;
# every W seconds a viewer starts or stops watching (nobody first). --viewer says which:
#   tab (the default): a headless Chromium is open on a blank tab throughout the run; the page
#     opens in a second tab, which then closes (what the page costs a user whose browser is
#     open anyway);
#   browser: Chromium starts with the page and exits (the page and a browser started for it);
#   api: a client reading what the page reads (api/stream, a line every second), as a browser
#     on another machine costs the job.
# A window's steps are those the server counted from --settle seconds after it began (the
# viewer's start-up, or its exit, not counted) to its end; each window watched is compared
# with the mean of the windows on either side of it, so that the job's drift and a run's own
# speed cancel. Prints each window and the viewer's CPU in it (tab: the browser's, blank tab
# or not), then the ratio of the watched windows' mean step to their neighbours'.
#   scripts/dashboard_bench.sh --alternate 20 --settle 8 --rounds 3 --epochs 20  # about 10 minutes
#   scripts/dashboard_bench.sh --alternate 20 --settle 8 --rounds 3 --epochs 20 --viewer api
# --refresh S: the page (and the api client) refresh every S seconds (default 1).
#
# Needs chromium and curl (scripts/setup.sh). Run on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=3
epochs=2
skip=200
config=configs/lenet_fmnist_m5.yaml
alternate=0
settle=3
viewer_kind=tab
refresh=1
epochs_set=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --epochs) epochs=$2; epochs_set=1; shift 2 ;;
    --alternate) alternate=$2; shift 2 ;;
    --settle) settle=$2; shift 2 ;;
    --viewer) viewer_kind=$2; shift 2 ;;
    --refresh) refresh=$2; shift 2 ;;
    --skip) skip=$2; shift 2 ;;
    --config) config=$2; shift 2 ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "dashboard_bench.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
chromium=$(command -v chromium || command -v chromium-browser || true)
[[ -n $chromium ]] || { echo "dashboard_bench.sh: chromium not found (apt-get install chromium)" >&2; exit 1; }
command -v curl >/dev/null || { echo "dashboard_bench.sh: curl not found" >&2; exit 1; }
[[ $viewer_kind =~ ^(tab|browser|api)$ ]] ||
  { echo "dashboard_bench.sh: --viewer must be tab, browser or api, not '$viewer_kind'" >&2; exit 2; }
work=$(mktemp -d /tmp/gp_dash_bench.XXXXXX)
viewer=""
cleanup() {
  [[ -z $viewer ]] || kill "$viewer" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# CPU ticks (1/CLK_TCK s) used so far by the processes whose command line holds $1.
ticks() {
  local p t=0
  for p in $(pgrep -f -- "$1" || true); do
    t=$(( t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0) ))
  done
  echo "$t"
}

# cpu_since TAG TICKS0 TIME0: % of one core the processes of TAG used since ticks TICKS0 at TIME0.
cpu_since() {
  awk -v k="$(( $(ticks "$1") - $2 ))" -v hz="$(getconf CLK_TCK)" -v t0="$3" \
    -v t1="$(date +%s.%N)" 'BEGIN { printf "%.1f", 100 * k / hz / (t1 - t0) }'
}

# open_browser URL PROFILE [FLAG...]: headless Chromium showing URL; sets viewer.
open_browser() {
  mkdir -p "$work/$2"
  local as_user=()
  if (( EUID == 0 )); then
    # A browser runs as a user. Run as root, Chromium raises its compositor and IO threads to
    # nice -8, ahead of the job's processes, which no user's browser can do.
    chmod o+x "$work"
    chown nobody: "$work/$2"
    as_user=(setpriv --reuid=nobody --regid=nogroup --clear-groups env HOME="$work/$2")
  fi
  "${as_user[@]}" "$chromium" --headless --no-sandbox --disable-gpu \
    --user-data-dir="$work/$2" --window-size=1400,1900 "${@:3}" "$1" >/dev/null 2>&1 &
  viewer=$!
}

page_url() { echo "http://127.0.0.1:$1/?refresh=$refresh"; }

# A browser open throughout on a blank tab (--viewer tab), driven through its DevTools
# HTTP endpoints: open_tab URL prints the new tab's id, close_tab ID closes it.
devtools=""
open_blank_browser() {
  devtools=$(free_port)
  open_browser about:blank "$1" --remote-debugging-port="$devtools"
  for _ in $(seq 300); do
    curl -sf -o /dev/null "http://127.0.0.1:$devtools/json/version" && return 0
    sleep 0.1
  done
  echo "dashboard_bench.sh: Chromium's DevTools endpoint did not answer" >&2
  exit 1
}
open_tab() {
  local id
  id=$(curl -sf -X PUT "http://127.0.0.1:$devtools/json/new?$1" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])' 2>/dev/null) ||
    { echo "dashboard_bench.sh: Chromium did not open a tab for $1" >&2; exit 1; }
  echo "$id"
}
close_tab() { curl -sf -o /dev/null "http://127.0.0.1:$devtools/json/close/$1" || true; }

# open_api PORT: a client reading what the page reads, api/stream (a line every --refresh s,
# each parsed); sets viewer. Its processes are those whose command line holds "python3 - PORT".
open_api() {
  python3 - "$1" "$refresh" <<'PY' &
import json, sys, time, urllib.request
base, since = f"http://127.0.0.1:{sys.argv[1]}/api/", 0
while True:
    try:
        with urllib.request.urlopen(f"{base}stream?since={since}&workers=1&every={sys.argv[2]}",
                                    timeout=30) as answer:
            for line in answer:
                since = json.loads(line)["next"]
    except Exception:
        pass
    time.sleep(float(sys.argv[2]))
PY
  viewer=$!
}

close_viewer() {
  [[ -n $viewer ]] || return 0
  kill "$viewer" 2>/dev/null || true
  wait "$viewer" 2>/dev/null || true
  viewer=""
}

# The step the server has reached (api/workers' server_step), empty when it does not answer.
server_step() {
  curl -sf "http://127.0.0.1:$1/api/workers" 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["server_step"])' 2>/dev/null || true
}

# alternated ROUND: one job, the viewer (--viewer) watching and not, alternated every
# $alternate s; prints a line per window: "mode first_step end_step mean_step_ms viewer_cpu".
alternated() {
  local round=$1 port out pid i=0 mode a b k0=0 t0 cpu tag="" tab
  port=$(free_port)
  out=$work/alt-$round
  if [[ $viewer_kind == tab ]]; then
    tag="profile-$round-blank"
    open_blank_browser "$tag"
  fi
  scripts/run.sh "$config" --dashboard "$port" --set "train.epochs=$epochs" \
    --set "output.dir=$out" >"$work/alt-$round.log" 2>&1 &
  pid=$!
  until [[ -n $(server_step "$port") ]]; do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  : >"$work/windows-$round"
  while kill -0 "$pid" 2>/dev/null; do
    mode=off
    tab=""
    if (( i % 2 )); then
      mode=$viewer_kind
      case $viewer_kind in
        tab) tab=$(open_tab "$(page_url "$port")") ;;
        browser) tag="profile-$round-$i"; open_browser "$(page_url "$port")" "$tag" ;;
        api) tag="python3 - $port"; open_api "$port" ;;
      esac
    elif [[ $viewer_kind != tab ]]; then
      tag=""
    fi
    sleep "$settle"
    a=$(server_step "$port")
    [[ -z $tag ]] || k0=$(ticks "$tag")
    t0=$(date +%s.%N)
    sleep "$(awk -v w="$alternate" -v s="$settle" 'BEGIN { print w - s }')"
    b=$(server_step "$port")
    cpu=-
    [[ -z $tag ]] || cpu=$(cpu_since "$tag" "$k0" "$t0")
    if [[ -n $tab ]]; then close_tab "$tab"; fi
    [[ $viewer_kind == tab ]] || close_viewer
    # A window the job ended in (the server gone) is not counted.
    [[ -n $a && -n $b ]] && echo "$mode $a $b $cpu" >>"$work/windows-$round"
    i=$((i + 1))
  done
  close_viewer
  wait "$pid" || { echo "dashboard_bench.sh: the alternated job failed; its log:" >&2; tail -20 "$work/alt-$round.log" >&2; exit 1; }
  cat "$out"/*/*/metrics.jsonl | python3 -c '
import json, sys
windows = [l.split() for l in open(sys.argv[1])]
ms = {}
for line in sys.stdin:
    r = json.loads(line)
    if "loss" in r and "step_ms" in r:
        ms.setdefault(r["step"], []).append(r["step_ms"])
for mode, a, b, cpu in windows:
    got = [v for s in range(int(a), int(b)) for v in ms.get(s, [])]
    if got:
        print(mode, a, b, sum(got) / len(got), cpu)' "$work/windows-$round"
}

if (( alternate > 0 )); then
  (( epochs_set )) || epochs=10
  (( alternate > settle + 1 )) || { echo "dashboard_bench.sh: --alternate must exceed --settle + 1" >&2; exit 2; }
  case $viewer_kind in
    tab) what="a browser open throughout on a blank tab, the page opened in a second tab and closed" ;;
    browser) what="no browser, and the page in a browser started for it" ;;
    api) what="no viewer, and a client reading the page's api stream (a line a second)" ;;
  esac
  echo "dashboard_bench: $config, $epochs epoch(s) a run, $rounds rounds; in each run $what," \
    "alternated every $alternate s; steps from $settle s into a window on"
  printf '%-6s %-8s %8s %8s %10s %12s\n' round viewer from to step_ms viewer_cpu%
  for ((i = 1; i <= rounds; i++)); do
    alternated "$i" | while read -r mode a b ms cpu; do
      printf '%-6s %-8s %8s %8s %10.3f %12s\n' "$i" "$mode" "$a" "$b" "$ms" "$cpu"
    done | tee -a "$work/table"
  done
  # Each window with the page open against the mean of its neighbours without it (same round).
  awk -v kind="$viewer_kind" '{ n++; rd[n] = $1; m[n] = $2; ms[n] = $5 }
    END {
      for (i = 1; i <= n; i++) {
        if (m[i] == "off") continue
        s = 0; c = 0
        if (i > 1 && rd[i - 1] == rd[i] && m[i - 1] == "off") { s += ms[i - 1]; c++ }
        if (i < n && rd[i + 1] == rd[i] && m[i + 1] == "off") { s += ms[i + 1]; c++ }
        if (!c) continue
        b += ms[i]; o += s / c; pairs++
      }
      if (!pairs) { print "dashboard_bench.sh: no window with the page open and a neighbour" > "/dev/stderr"; exit 1 }
      r = b / o
      without = kind == "tab" ? "a blank tab" : "nobody watching"
      printf "%s: mean step_ms %.3f vs %.3f with %s, %d windows against their neighbours: ratio %.4f (%+.2f%%; target at most +2%%: %s)\n",
             kind, b / pairs, o / pairs, without, pairs, r, (r - 1) * 100, r <= 1.02 ? "met" : "NOT met"
    }' "$work/table"
  exit 0
fi

# run MODE ROUND: one job; prints "step_ms requests viewer_cpu" (the viewer's CPU in % of one
# core from its 5th second to the job's end; "-" for nobody).
run() {
  local mode=$1 round=$2 port out pid requests=0 r n=0 t0=0 k0=0 cpu=-
  port=$(free_port)
  out=$work/$mode-$round
  scripts/run.sh "$config" --dashboard "$port" --set "train.epochs=$epochs" \
    --set "output.dir=$out" >"$work/$mode-$round.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do  # the page is up once the server is
    curl -sf -o /dev/null "http://127.0.0.1:$port/api/workers" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ $mode == browser ]]; then
    open_browser "$(page_url "$port")" "profile-$round"
  elif [[ $mode == api ]]; then
    open_api "$port"
  fi
  local tag="profile-$round"
  [[ $mode == api ]] && tag="python3 - $port"
  while kill -0 "$pid" 2>/dev/null; do
    if [[ $mode != off ]] && (( ++n == 5 )); then
      t0=$(date +%s.%N)
      k0=$(ticks "$tag")
    fi
    r=$(curl -sf "http://127.0.0.1:$port/metrics" 2>/dev/null |
      sed -n 's/^gradpress_dashboard_requests_total \([0-9]*\)$/\1/p' || true)
    [[ -z $r ]] || requests=$r
    sleep 1
  done
  wait "$pid" || { echo "dashboard_bench.sh: the $mode job failed; its log:" >&2; tail -20 "$work/$mode-$round.log" >&2; exit 1; }
  if [[ -n $viewer ]]; then
    if (( n > 5 )); then
      cpu=$(cpu_since "$tag" "$k0" "$t0")
    fi
    close_viewer
  fi
  local ms
  ms=$(cat "$out"/*/*/metrics.jsonl | python3 -c '
import json, sys
skip, ms = int(sys.argv[1]), []
for line in sys.stdin:
    r = json.loads(line)
    if "loss" in r and "step_ms" in r and r["step"] >= skip:
        ms.append(r["step_ms"])
print(sum(ms) / len(ms) if ms else 0)' "$skip")
  echo "$ms $requests $cpu"
}

echo "dashboard_bench: $config, $epochs epoch(s) a run, $rounds rounds, steps from $skip on"
printf '%-6s %-8s %10s %10s %12s\n' round viewer step_ms requests viewer_cpu%
declare -A sum
modes=(off api browser)
for ((i = 1; i <= rounds; i++)); do
  for ((k = 0; k < 3; k++)); do
    mode=${modes[$(( (k + i - 1) % 3 ))]}  # each round starts with another mode
    read -r ms req cpu < <(run "$mode" "$i")
    printf '%-6s %-8s %10.3f %10s %12s\n' "$i" "$mode" "$ms" "$req" "$cpu"
    [[ $mode == off ]] || (( req > 10 )) || { echo "dashboard_bench.sh: the $mode viewer made $req requests" >&2; exit 1; }
    sum[$mode]=$(awk -v a="${sum[$mode]:-0}" -v b="$ms" 'BEGIN { print a + b }')
  done
done
for mode in api browser; do
  awk -v v="${sum[$mode]}" -v off="${sum[off]}" -v n="$rounds" -v m="$mode" 'BEGIN {
    r = v / off
    printf "%-8s mean step_ms %.3f vs %.3f with nobody watching: ratio %.4f (%+.2f%%; target at most +2%%: %s)\n",
           m, v / n, off / n, r, (r - 1) * 100, r <= 1.02 ? "met" : "NOT met"
  }'
done
