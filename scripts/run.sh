#!/usr/bin/env bash
# The main job: one gradpress-server and N gradpress-worker processes on this machine, one
# run per config, then a table per run.
#
#   scripts/run.sh                                   # LeNet / Fashion-MNIST, method 1 vs method 5
#   scripts/run.sh configs/lenet_fmnist_m3.yaml --set train.epochs=2 --workers 2
#   scripts/run.sh --resume runs/lenet-fmnist-m1/20261122-1300   # continue a stopped run
#   scripts/run.sh --table runs/lenet-fmnist-m1/20261122-1300 ...  # the table of finished runs
#   scripts/run.sh configs/lenet_fmnist_m5.yaml --servers 2     # the model sharded on 2 servers
#   scripts/run.sh configs/lenet_fmnist_m5.yaml --dashboard 8080  # live page on 127.0.0.1:8080
#
# Each run writes <output.dir>/<name>/<timestamp>/ (output.dir: runs unless the config or
# --set output.dir=... says otherwise): config.yaml, server.log, worker-<rank>.log,
# metrics.jsonl, summary.json, ckpt/ (server and worker-<rank> checkpoints every
# train.checkpoint_every steps and at the end). Ctrl-C stops the workers (each finishes its
# step and checkpoints), then the server. --resume restarts everyone from the newest step
# that the server and every worker have a checkpoint of. Builds if needed. --servers S starts
# S gradpress-server shards (--shard i --shards S; logs server-<i>.log, checkpoints
# ckpt/server-<i>) and gives the workers cluster.servers. --dashboard PORT sets
# server.metrics_port (shard i: PORT + i) and prints the dashboard's URL while the job runs;
# afterwards scripts/dashboard.sh RUN_DIR rebuilds the page from metrics.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/launch.sh

configs=()
sets=()
workers=2
servers=1
resume_dir=""
table_dirs=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --set) sets+=(--set "$2"); shift 2 ;;
    --set=*) sets+=(--set "${1#--set=}"); shift ;;
    --workers) workers=$2; shift 2 ;;
    --servers) servers=$2; shift 2 ;;
    --dashboard) [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --dashboard takes a port" >&2; exit 2; }
                 sets+=(--set "server.metrics_port=$2"); shift 2 ;;
    --resume) resume_dir=${2%/}; shift 2 ;;
    --table) shift; while [[ $# -gt 0 && "$1" != -* ]]; do table_dirs+=("${1%/}"); shift; done ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    -*) echo "run.sh: unknown option '$1'" >&2; exit 2 ;;
    *) [[ -f "$1" ]] || { echo "run.sh: no config file '$1'" >&2; exit 2; }
       configs+=("$1"); shift ;;
  esac
done
if [[ -n "$resume_dir" ]]; then
  [[ -f "$resume_dir/config.yaml" ]] || { echo "run.sh: $resume_dir/config.yaml missing: not a run directory" >&2; exit 2; }
  [[ ${#configs[@]} -eq 0 && ${#sets[@]} -eq 0 ]] || { echo "run.sh: --resume takes no config or --set (the run's resolved config.yaml is used)" >&2; exit 2; }
  configs=("$resume_dir/config.yaml")
  workers=$(sed -n 's/^ *workers: *\([0-9]*\).*/\1/p' "$resume_dir/config.yaml" | head -1)
fi
[[ ${#configs[@]} -gt 0 ]] || configs=(configs/lenet_fmnist_m1.yaml configs/lenet_fmnist_m5.yaml)
[[ "$workers" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --workers takes a positive integer" >&2; exit 2; }
[[ "$servers" =~ ^[1-9][0-9]*$ && $servers -le 64 ]] || { echo "run.sh: --servers takes 1..64" >&2; exit 2; }
if [[ -n "$resume_dir" && -d "$resume_dir/ckpt/server-0" ]]; then
  servers=$(ls -d "$resume_dir"/ckpt/server-* | wc -l)
fi
ckpt_names=(server)
if [[ $servers -gt 1 ]]; then
  ckpt_names=()
  for ((s = 0; s < servers; s++)); do ckpt_names+=("server-$s"); done
fi

# The table: scripts/summary_table.py (its time columns: every *_ms field of summary.json).
print_table() { python3 scripts/summary_table.py "$@"; }


if [[ ${#table_dirs[@]} -gt 0 ]]; then
  print_table "${table_dirs[@]}"
  exit 0
fi

BUILD_DIR=${BUILD_DIR:-build}
server_bin=$BUILD_DIR/server/gradpress-server
worker_bin=$BUILD_DIR/worker/gradpress-worker
bash scripts/setup.sh >/dev/null
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >/dev/null
fi
echo "run.sh: building gradpress-server and gradpress-worker (first time: several minutes)"
cmake --build "$BUILD_DIR" -j "${JOBS:-2}" --target gradpress-server gradpress-worker >/dev/null

pids=()
server_pids=()
is_server() { [[ " ${server_pids[*]} " == *" $1 "* ]]; }
stop_all() {
  # Workers first: each finishes its step and writes a checkpoint; then the server (final
  # checkpoint). A worker stuck in a barrier its peer left gets 15 s.
  for pid in "${pids[@]}"; do is_server "$pid" || kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 150); do
    alive=0
    for pid in "${pids[@]}"; do ! is_server "$pid" && kill -0 "$pid" 2>/dev/null && alive=1; done
    [[ $alive -eq 0 ]] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}
trap 'echo; echo "run.sh: interrupted, stopping"; stop_all; exit 130' INT TERM
trap stop_all EXIT

run_dirs=()
for cfg in "${configs[@]}"; do
  if [[ -z "$resume_dir" ]]; then
    # name and output.dir of the resolved config (file + --set), read by the worker's own
    # config loader: a bad config fails here, naming the key.
    resolved=$("$worker_bin" --config "$cfg" "${sets[@]}" --print-config) || exit 2
    mapfile -t picked < <(printf '%s\n' "$resolved" | python3 -c '
import sys, yaml
c = yaml.safe_load(sys.stdin)
print(c.get("name") or "run")
print((c.get("output") or {}).get("dir") or "runs")')
    name=${picked[0]}
    out_dir=${picked[1]}
  fi
  resume_args=()
  server_resume=()
  if [[ -n "$resume_dir" ]]; then
    run_dir=$resume_dir
    # The newest step held by the server and by every worker.
    step=$(for d in "${ckpt_names[@]/#/$run_dir/ckpt/}" "$run_dir"/ckpt/worker-*; do
             ls "$d" 2>/dev/null | sed -n 's/^step-\([0-9]*\)\.ckpt$/\1/p' | sort -u
           done | sort | uniq -c | awk -v n=$((workers + servers)) '$1 == n {print $2}' | sort | tail -n 1)
    [[ -n "$step" ]] || { echo "run.sh: no step is checkpointed by every server and all $workers workers in $run_dir/ckpt" >&2; exit 1; }
    echo "== resuming $run_dir from step $((10#$step)) ($workers workers)"
    resume_args=(--resume auto)
    server_resume=(yes)
  else
    run_dir=$out_dir/$name/$(date +%Y%m%d-%H%M%S)
    mkdir -p "$run_dir"
    echo "== $cfg -> $run_dir ($workers workers)"
  fi
  server_pids=()
  addresses=()
  for ((s = 0; s < servers; s++)); do
    base=${ckpt_names[$s]}  # server, or server-<i> for shard i of several
    res=()
    [[ ${#server_resume[@]} -gt 0 ]] && res=(--resume "$run_dir/ckpt/$base/step-$step.ckpt")
    "$server_bin" --config "$cfg" "${sets[@]}" --listen 127.0.0.1:0 --workers "$workers" \
      --shard "$s" --shards "$servers" --run-dir "$run_dir" "${res[@]}" \
      --log-file "$run_dir/$base.log" >"$run_dir/$base.out" 2>&1 &
    server_pids+=($!)
    pids+=($!)
    port=$(gp_server_port "$run_dir" "$!" "$base.out") || { echo "run.sh: server $s did not start" >&2; exit 1; }
    addresses+=("127.0.0.1:$port")
    # With server.metrics_port, the server logs its dashboard's URL before it says it listens.
    url=$(sed -n 's/.*dashboard: \(http[^ ]*\).*/\1/p' "$run_dir/$base.out" | head -1)
    [[ -z $url ]] || echo "== dashboard ($base): $url (live while the job runs)"
  done
  shard_sets=()
  if [[ $servers -gt 1 ]]; then
    shard_sets=(--set "cluster.servers=$(IFS=,; echo "${addresses[*]}")")
  fi
  worker_pids=()
  for ((r = 0; r < workers; r++)); do
    "$worker_bin" --config "$cfg" "${sets[@]}" "${shard_sets[@]}" --rank "$r" --workers "$workers" \
      --server "${addresses[0]}" --run-dir "$run_dir" "${resume_args[@]}" \
      >>"$run_dir/worker-$r.log" 2>&1 &
    worker_pids+=($!)
    pids+=($!)
  done
  gp_follow "$run_dir" "${worker_pids[0]}"
  failed=0
  gp_wait_workers run.sh "$run_dir" "${worker_pids[@]}" || failed=1
  for pid in "${server_pids[@]}"; do gp_stop_server "$pid"; done
  pids=()
  [[ $failed -eq 0 ]] || exit 1
  run_dirs+=("$run_dir")
done

print_table "${run_dirs[@]}"
