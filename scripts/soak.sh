#!/usr/bin/env bash
# A soak: a method-5 job (LeNet on Fashion-MNIST, top-k 1% then QSGD both ways with error
# feedback; 8 workers, 2 shards) runs for about --minutes M with a fault injected every few
# minutes, and is compared with the same job run without faults.
#
#   scripts/soak.sh --minutes 60                 # the full soak (about 2 h: the fault-free run too)
#   scripts/soak.sh --minutes 8 --build build    # a short one
#
# Faults, in turn, one every --fault-every seconds (default M*60/8, at least 45 s), none in
# the last quarter of the fault-free run's length (the steady state the last minute measures):
#   worker_kill  a worker SIGKILLed, restarted with --resume auto and the next incarnation
#   resets       every worker<->shard connection reset (scripts/faultproxy.py, SIGUSR1)
#   shard        a shard restarted: SIGTERM (final checkpoint), then --resume auto on its port
# and throughout: 0.2% of the workers' RPC attempts lose the request and 0.2% the reply
# (GRADPRESS_FAULTS; a lost reply's retry is a duplicate the server must not apply twice).
# Every process runs on 127.0.0.1; the shards behind one faultproxy each.
#
# Sampled every 5 s per process (/proc): RSS, threads, open fds. Fails (exit 1) when
#   - a process that lived past its warm-up (the larger of 60 s and a fifth of the run) grew:
#     RSS by more than 10%, threads by more than 2, fds by more than 4 (the median of its last
#     minute against the median of the minute after its warm-up);
#   - the pushes do not add up: the shards' pushes_applied (every incarnation's, from its
#     final "served" line) against the (worker, step) pairs the workers logged in
#     metrics.jsonl, times the shards: never fewer (a lost push), and more by at most one per
#     shard for each worker kill (a push applied whose step the killed worker never logged);
#     anything above that is a push counted twice;
#   - the final test accuracy is more than 0.5 points off the fault-free run's;
#   - the job does not finish within 3 M + 5 minutes.
# Writes $out/soak.md (the figures) and samples.csv; exit 0 when all holds.
# Options: --build DIR (default build), --worker-bin/--server-bin (default: DIR's), --out DIR,
# --workers N (8), --shards N (2), --fault-every S, --no-baseline (checks all but accuracy),
# --epochs N (instead of the calibration's estimate).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
minutes=60
build=$repo/build
workers=8
shards=2
fault_every=""
out=""
baseline=1
epochs=""
server_bin="" worker_bin=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --server-bin) server_bin=$2; shift 2 ;;
    --worker-bin) worker_bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --shards) shards=$2; shift 2 ;;
    --fault-every) fault_every=$2; shift 2 ;;
    --no-baseline) baseline=0; shift ;;
    --epochs) epochs=$2; shift 2 ;;
    *) echo "soak.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
server_bin=${server_bin:-$build/server/gradpress-server}
worker_bin=${worker_bin:-$build/worker/gradpress-worker}
for b in "$server_bin" "$worker_bin"; do
  [[ -x $b ]] || { echo "soak.sh: $b not built (cmake --build $build --target gradpress-server gradpress-worker)" >&2; exit 1; }
done
[[ -n $fault_every ]] || fault_every=$(( minutes * 60 / 8 < 45 ? 45 : minutes * 60 / 8 ))
out=${out:-$(mktemp -d /tmp/gp_soak.XXXXXX)}
mkdir -p "$out"
config=$repo/configs/lenet_fmnist_m5.yaml
batch=64
steps_per_epoch=$(( 60000 / (workers * batch) ))
sets=(--set device=cpu --set train.log_every=0 --set train.checkpoint_every=50
      --set server.worker_timeout_s=20 --set dataset.test_subset=0)

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
log() { echo "soak.sh: $(date +%T) $*" >&2; }

# --- one job: shards, optional proxies, workers ----------------------------------------------
declare -A shard_pid shard_port proxy_pid proxy_port wpid incarnation listening
job_dir="" job_sets=() faulty=0

start_shard() {  # SHARD [args...]
  local i=$1; shift
  "$server_bin" --config "$config" "${sets[@]}" "${job_sets[@]}" --listen "127.0.0.1:${shard_port[$i]}" \
    --workers "$workers" --shard "$i" --shards "$shards" --run-dir "$job_dir" "$@" \
    >>"$job_dir/server-$i.out" 2>&1 &
  shard_pid[$i]=$!
  pids+=("${shard_pid[$i]}")
  for _ in $(seq 600); do
    (( $(grep -c "listening on port" "$job_dir/server-$i.out" || true) > ${listening[$i]:-0} )) && {
      listening[$i]=$(grep -c "listening on port" "$job_dir/server-$i.out"); return 0; }
    kill -0 "${shard_pid[$i]}" 2>/dev/null || break
    sleep 0.1
  done
  tail -20 "$job_dir/server-$i.out" >&2
  log "shard $i did not start"
  return 1
}

start_worker() {  # RANK [args...]: with $faulty, RPC drops seeded by rank and incarnation
  local r=$1 f=""; shift
  [[ $faulty == 1 ]] && f="drop=0.002,drop_reply=0.002,seed=$(( r * 100 + ${incarnation[$r]} ))"
  GRADPRESS_FAULTS=$f "$worker_bin" --config "$config" "${sets[@]}" "${job_sets[@]}" \
    --rank "$r" --workers "$workers" --server "127.0.0.1:${front[0]}" --run-dir "$job_dir" \
    --incarnation "${incarnation[$r]}" "$@" >>"$job_dir/worker-$r.out" 2>&1 &
  wpid[$r]=$!
  pids+=("${wpid[$r]}")
}

# start_job DIR EPOCHS PROXIED
start_job() {
  job_dir=$1
  mkdir -p "$job_dir"
  listening=()
  local i servers=""
  front=()
  for (( i = 0; i < shards; i++ )); do
    shard_port[$i]=$(free_port)
    start_shard "$i"
    if [[ $3 == 1 ]]; then
      proxy_port[$i]=$(free_port)
      python3 "$repo/scripts/faultproxy.py" --listen "127.0.0.1:${proxy_port[$i]}" \
        --connect "127.0.0.1:${shard_port[$i]}" 2>>"$job_dir/proxy-$i.out" &
      proxy_pid[$i]=$!
      pids+=("${proxy_pid[$i]}")
      front[$i]=${proxy_port[$i]}
    else
      front[$i]=${shard_port[$i]}
    fi
    servers+="${servers:+,}127.0.0.1:${front[$i]}"
  done
  job_sets=(--set "cluster.servers=$servers" --set "train.epochs=$2")
  for (( i = 0; i < workers; i++ )); do
    incarnation[$i]=1
    start_worker "$i"
  done
}

# Steps logged: the distinct (rank, step) pairs of metrics.jsonl's step rows.
logged_pairs() {
  grep -o '"rank": [0-9]*, "step": [0-9]*, "loss"' "$1/metrics.jsonl" 2>/dev/null | sort -u | wc -l
}
max_step() {
  local s
  s=$(grep -o '"step": [0-9]*, "loss"' "$1/metrics.jsonl" 2>/dev/null | sed 's/[^0-9]//g' | sort -n | tail -1)
  echo "${s:-0}"
}
acc() { sed -n 's/.*"test_acc": \([0-9.]*\).*/\1/p' "$1/summary.json" 2>/dev/null || true; }

workers_alive() {
  local r
  for (( r = 0; r < workers; r++ )); do kill -0 "${wpid[$r]}" 2>/dev/null && return 0; done
  return 1
}

stop_shards() {
  local i rc ok=0
  for (( i = 0; i < shards; i++ )); do
    kill -TERM "${shard_pid[$i]}" 2>/dev/null || true
    rc=0; wait "${shard_pid[$i]}" || rc=$?
    [[ $rc == 0 ]] || { log "shard $i exited $rc"; ok=1; }
    [[ -n ${proxy_pid[$i]:-} ]] && { kill -TERM "${proxy_pid[$i]}" 2>/dev/null || true; wait "${proxy_pid[$i]}" 2>/dev/null || true; }
  done
  proxy_pid=()
  return $ok
}

# Waits for every worker to exit 0 (deadline: epoch seconds). Exit codes of restarted
# workers' predecessors (SIGKILLed) are not looked at.
finish_workers() {
  local r rc ok=0
  for (( r = 0; r < workers; r++ )); do
    while kill -0 "${wpid[$r]}" 2>/dev/null && (( $(date +%s) < $1 )); do sleep 1; done
    if kill -0 "${wpid[$r]}" 2>/dev/null; then log "worker $r still running at the deadline"; return 1; fi
    rc=0; wait "${wpid[$r]}" || rc=$?
    [[ $rc == 0 ]] || { log "worker $r exited $rc"; tail -5 "$job_dir/worker-$r.out" >&2; ok=1; }
  done
  return $ok
}

# --- calibration: the fault-free job's steps per second sets the epochs --------------------
rate="n/a (--epochs)"
if [[ -z $epochs ]]; then
  log "calibrating: $workers workers, $shards shards, fault-free, 60 s"
  start_job "$out/calibrate" 1000 0
  sleep 20
  s0=$(max_step "$out/calibrate")
  sleep 40
  s1=$(max_step "$out/calibrate")
  for (( r = 0; r < workers; r++ )); do kill -9 "${wpid[$r]}" 2>/dev/null || true; wait "${wpid[$r]}" 2>/dev/null || true; done
  for (( i = 0; i < shards; i++ )); do kill -9 "${shard_pid[$i]}" 2>/dev/null || true; wait "${shard_pid[$i]}" 2>/dev/null || true; done
  rate=$(awk -v a="$s0" -v b="$s1" 'BEGIN { printf "%.2f", (b - a) / 40 }')
  # Faults cost time (restarts, retries): the faulted run gets 85% of the steps the time allows.
  epochs=$(awk -v r="$rate" -v m="$minutes" -v s="$steps_per_epoch" \
    'BEGIN { e = int(r * m * 60 * 0.85 / s); print (e < 1 ? 1 : e) }')
  log "rate $rate steps/s -> $epochs epochs of $steps_per_epoch steps"
fi

# --- the fault-free run ---------------------------------------------------------------------
base_acc="" base_s=""
if [[ $baseline == 1 ]]; then
  log "fault-free run"
  t0=$(date +%s)
  start_job "$out/baseline" "$epochs" 0
  finish_workers $(( t0 + (3 * minutes + 5) * 60 )) || { log "FAILED: the fault-free run did not finish"; exit 1; }
  stop_shards || true
  base_acc=$(acc "$out/baseline")
  base_s=$(( $(date +%s) - t0 ))
  log "fault-free: test acc $base_acc in $base_s s"
fi

# --- the soak -------------------------------------------------------------------------------
log "soak: faults every $fault_every s"
t0=$(date +%s)
deadline=$(( t0 + (3 * minutes + 5) * 60 ))
faulty=1
start_job "$out/soak" "$epochs" 1
samples=$out/samples.csv
echo "t,role,pid,rss_kb,threads,fds" >"$samples"
sample() {
  local now role pid st rss thr fds i r
  now=$(( $(date +%s) - t0 ))
  for (( i = 0; i < shards; i++ )); do echo "server-$i ${shard_pid[$i]}"; done >"$out/.roles"
  for (( r = 0; r < workers; r++ )); do echo "worker-$r ${wpid[$r]}"; done >>"$out/.roles"
  while read -r role pid; do
    st=/proc/$pid/status
    [[ -r $st ]] || continue
    rss=$(awk '/^VmRSS:/ {print $2}' "$st" 2>/dev/null || true)
    thr=$(awk '/^Threads:/ {print $2}' "$st" 2>/dev/null || true)
    fds=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
    [[ -n $rss && -n $thr ]] && echo "$now,$role,$pid,$rss,$thr,$fds" >>"$samples"
  done <"$out/.roles"
}
faults_done=()
kills=0 resets=0 restarts=0
next_fault=$(( t0 + fault_every ))
kind=0
while workers_alive; do
  sample
  now=$(date +%s)
  if (( now >= deadline )); then log "FAILED: the soak did not finish by its deadline"; exit 1; fi
  # No fault in the last quarter of the expected run (the fault-free run's length): the last
  # minute then shows the steady state, not a barrier still filling after a kill.
  if (( now >= next_fault )) && { [[ -z $base_s ]] || (( now - t0 < base_s * 3 / 4 )); }; then
    case $(( kind % 3 )) in
      0)
        r=$(( (kills * 3 + 1) % workers ))
        if kill -0 "${wpid[$r]}" 2>/dev/null; then
          kill -9 "${wpid[$r]}"; wait "${wpid[$r]}" 2>/dev/null || true
          incarnation[$r]=$(( ${incarnation[$r]} + 1 ))
          start_worker "$r" --resume auto
          kills=$(( kills + 1 ))
          faults_done+=("$(( now - t0 )) s: worker $r SIGKILLed at step $(max_step "$out/soak"), restarted (incarnation ${incarnation[$r]})")
          log "${faults_done[-1]}"
        fi
        ;;
      1)
        for (( i = 0; i < shards; i++ )); do kill -USR1 "${proxy_pid[$i]}" 2>/dev/null || true; done
        resets=$(( resets + 1 ))
        faults_done+=("$(( now - t0 )) s: every connection reset at step $(max_step "$out/soak")")
        log "${faults_done[-1]}"
        ;;
      2)
        i=$(( restarts % shards ))
        kill -TERM "${shard_pid[$i]}"
        rc=0; wait "${shard_pid[$i]}" || rc=$?
        [[ $rc == 0 ]] || { log "FAILED: shard $i exited $rc on SIGTERM"; exit 1; }
        start_shard "$i" --resume auto
        restarts=$(( restarts + 1 ))
        faults_done+=("$(( now - t0 )) s: shard $i restarted (SIGTERM, --resume auto) at step $(max_step "$out/soak")")
        log "${faults_done[-1]}"
        ;;
    esac
    kind=$(( kind + 1 ))
    next_fault=$(( now + fault_every ))
  fi
  sleep 5
done
soak_s=$(( $(date +%s) - t0 ))
ok=0
finish_workers "$deadline" || { log "FAILED: a worker did not complete"; ok=1; }
stop_shards || { log "FAILED: a shard did not stop cleanly"; ok=1; }
soak_acc=$(acc "$out/soak")

# --- the checks -----------------------------------------------------------------------------
applied=$(sed -n 's/.*served [0-9]* steps.*, \([0-9]*\) pushes applied.*/\1/p' "$out"/soak/server-*.out |
  awk '{s += $1} END {print s + 0}')
incarnations=$(grep -c "pushes applied" "$out"/soak/server-*.out | awk -F: '{s += $2} END {print s + 0}')
dups=$(sed -n 's/.*pushes applied, \([0-9]*\) duplicates.*/\1/p' "$out"/soak/server-*.out | awk '{s += $1} END {print s + 0}')
pairs=$(logged_pairs "$out/soak")
expected=$(( pairs * shards ))
extra=$(( applied - expected ))
push_ok=1
(( incarnations == shards + restarts )) || { log "FAILED: $incarnations shard exits logged their counters, expected $(( shards + restarts ))"; push_ok=0; }
(( extra >= 0 )) || { log "FAILED: $(( -extra )) pushes lost: workers logged $pairs steps x $shards shards, shards applied $applied"; push_ok=0; }
(( extra <= kills * shards )) || { log "FAILED: $(( extra - kills * shards )) pushes counted twice: applied $applied, logged $pairs x $shards, $kills kills"; push_ok=0; }
(( push_ok == 1 )) || ok=1

growth=$(python3 - "$samples" "$soak_s" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
run_s = float(sys.argv[2])
warm = max(60.0, run_s / 5)
by = {}
for r in rows:
    by.setdefault((r["role"], r["pid"]), []).append(r)
bad, lines = [], []
for (role, pid), rs in sorted(by.items()):
    t0 = float(rs[0]["t"])
    after = [r for r in rs if float(r["t"]) - t0 >= warm]
    if len(after) < 24 or float(rs[-1]["t"]) - t0 < warm + 120:
        lines.append(f"| {role} (pid {pid}) | {float(rs[-1]['t']) - t0:.0f} s | too short to judge | | |")
        continue
    first = [r for r in after if float(r["t"]) - float(after[0]["t"]) < 60]
    last = [r for r in after if float(after[-1]["t"]) - float(r["t"]) < 60]
    def med(rows, k):
        return statistics.median(float(r[k]) for r in rows)
    rss0, rss1 = med(first, "rss_kb"), med(last, "rss_kb")
    th0, th1 = med(first, "threads"), med(last, "threads")
    fd0, fd1 = med(first, "fds"), med(last, "fds")
    g = (rss1 / rss0 - 1) * 100
    ok = g <= 10 and th1 - th0 <= 2 and fd1 - fd0 <= 4
    if not ok:
        bad.append(role)
    lines.append(f"| {role} (pid {pid}) | {float(rs[-1]['t']) - t0:.0f} s | "
                 f"{rss0 / 1024:.1f} -> {rss1 / 1024:.1f} MB ({g:+.1f}%) | "
                 f"{th0:.0f} -> {th1:.0f} | {fd0:.0f} -> {fd1:.0f} |" + ("" if ok else " GREW"))
print("\n".join(lines))
print("BAD " + " ".join(bad) if bad else "OK")
EOF
)
grep -q "^OK$" <<<"$growth" || { log "FAILED: growth after warm-up: $(tail -1 <<<"$growth")"; ok=1; }

acc_line="no fault-free run (--no-baseline)"
if [[ $baseline == 1 ]]; then
  if [[ -z $soak_acc || -z $base_acc ]]; then
    log "FAILED: no final accuracy (soak '$soak_acc', fault-free '$base_acc')"; ok=1
  else
    diff=$(awk -v a="$soak_acc" -v b="$base_acc" 'BEGIN { printf "%+.2f", (a - b) * 100 }')
    acc_line="test acc $soak_acc vs $base_acc fault-free: $diff points"
    awk -v d="$diff" 'BEGIN { exit !(d <= 0.5 && d >= -0.5) }' || { log "FAILED: accuracy $diff points off"; ok=1; }
  fi
fi

{
  echo "# Soak: $(basename "$config"), $workers workers, $shards shards, $epochs epochs"
  echo
  echo "- run: $soak_s s with faults (fault-free run: ${base_s:-n/a} s); rate at calibration $rate steps/s"
  echo "- faults: $kills worker kills, $resets connection-reset rounds, $restarts shard restarts;"
  echo "  drops: 0.2% requests and 0.2% replies lost on every worker throughout"
  echo "- pushes: shards applied $applied over $incarnations shard incarnations; workers logged"
  echo "  $pairs (rank, step) pairs x $shards shards = $expected; difference $extra (allowed 0..$(( kills * shards )));"
  echo "  $dups duplicates acknowledged without being applied"
  echo "- accuracy: $acc_line"
  echo
  echo "| process | lived | RSS (median, minute after warm-up -> last minute) | threads | fds |"
  echo "|---|---|---|---|---|"
  grep "^|" <<<"$growth"
  echo
  printf -- '- %s\n' "${faults_done[@]}"
} | tee "$out/soak.md"
if [[ $ok != 0 ]]; then
  log "FAILED (logs in $out)"
  exit 1
fi
log "ok (logs in $out)"
