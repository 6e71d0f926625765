#!/usr/bin/env bash
# torchrun-style launch: identity from RANK / WORLD_SIZE, the server from GRADPRESS_SERVER or
# cluster.server but never MASTER_ADDR / MASTER_PORT, and a restart through
# scripts/launch_worker.sh with TORCHELASTIC_RESTART_COUNT=1 (-> --resume auto --incarnation 2).
# Real processes: a server and 2 workers on a Fashion-MNIST subset with checkpoints every 5
# steps; worker 1 is killed (SIGKILL) once it has checkpointed, restarted through the wrapper,
# and the job must finish: both workers exit 0 and summary.json exists.
#   torchrun_test.sh SOURCE_DIR SERVER_BIN WORKER_BIN
set -euo pipefail
src=$1; server_bin=$2; worker_bin=$3
tmp=$(mktemp -d)
run=$tmp/run
mkdir -p "$run"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
fail() {
  echo "torchrun_test: FAIL: $*" >&2
  for f in "$run"/server.out "$run"/worker-*.log; do [[ -f "$f" ]] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }; done
  exit 1
}
# Method 1 (weights travel down): a lone restarted worker resumes from the server's weights
# even when the server is past its newest checkpoint. Gradient-exchange methods (3-6) need a
# worker checkpoint of exactly the server's step (the whole job restarts: scripts/run.sh --resume).
cfg=$src/configs/lenet_fmnist_m1.yaml
sets=(--set train.epochs=2 --set dataset.subset=6144 --set dataset.test_subset=512
      --set train.checkpoint_every=5)
launch=$src/scripts/launch_worker.sh
export GRADPRESS_WORKER_BIN=$worker_bin
unset RANK WORLD_SIZE GRADPRESS_SERVER SLURM_PROCID SLURM_NTASKS TORCHELASTIC_RESTART_COUNT GRADPRESS_RESTART_COUNT

# Identity errors name the environment variable they came from.
rc=0; RANK=2 WORLD_SIZE=2 "$launch" --config "$cfg" >"$tmp/bad" 2>&1 || rc=$?
[[ $rc -eq 2 ]] && grep -q 'rank 2 (from $RANK) must be below the number of workers 2 (from $WORLD_SIZE)' "$tmp/bad" \
  || fail "RANK=2 WORLD_SIZE=2: rc $rc: $(cat "$tmp/bad")"
# GRADPRESS_SERVER is read (a bad value is an error naming it) even with MASTER_* set.
rc=0; GRADPRESS_SERVER=nohost MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 "$launch" --config "$cfg" >"$tmp/bad" 2>&1 || rc=$?
[[ $rc -eq 2 ]] && grep -q 'GRADPRESS_SERVER' "$tmp/bad" || fail "GRADPRESS_SERVER=nohost: rc $rc: $(cat "$tmp/bad")"
rc=0; TORCHELASTIC_RESTART_COUNT=x "$launch" --config "$cfg" >"$tmp/bad" 2>&1 || rc=$?
[[ $rc -eq 2 ]] || fail "a non-numeric restart count was accepted"

"$server_bin" --config "$cfg" "${sets[@]}" --listen 127.0.0.1:0 --workers 2 --run-dir "$run" \
  --resume auto >"$run/server.out" 2>&1 &
server_pid=$!; pids+=($server_pid)
for _ in $(seq 300); do grep -q "listening on port" "$run/server.out" && break; sleep 0.1; done
port=$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$run/server.out")
[[ -n "$port" ]] || fail "server did not start"
# The same resolved config for every worker (the server compares config hashes).
sets+=(--set "cluster.server=127.0.0.1:$port")

# Worker 0: no GRADPRESS_SERVER; MASTER_ADDR/MASTER_PORT point nowhere; cluster.server is right.
MASTER_ADDR=10.255.255.1 MASTER_PORT=1 RANK=0 WORLD_SIZE=2 TORCHELASTIC_RESTART_COUNT=0 \
  "$launch" --config "$cfg" "${sets[@]}" --run-dir "$run" >"$run/worker-0.log" 2>&1 &
w0=$!; pids+=($w0)
# Worker 1: GRADPRESS_SERVER (wins over cluster.server), MASTER_* pointing elsewhere.
MASTER_ADDR=10.255.255.1 MASTER_PORT=1 RANK=1 WORLD_SIZE=2 GRADPRESS_SERVER=127.0.0.1:$port \
  "$launch" --config "$cfg" "${sets[@]}" --run-dir "$run" >"$run/worker-1.log" 2>&1 &
w1=$!; pids+=($w1)

# Kill worker 1 once it has written a checkpoint past step 5.
for _ in $(seq 1200); do
  n=$( (find "$run/ckpt/worker-1" -name 'step-*.ckpt' 2>/dev/null || true) | wc -l)
  [[ $n -ge 2 ]] && break
  kill -0 $w1 2>/dev/null || fail "worker 1 ended before it could be killed mid-run"
  sleep 0.05
done
[[ $n -ge 2 ]] || fail "worker 1 wrote no checkpoints"
kill -KILL $w1; wait $w1 2>/dev/null || true
killed_at=$(find "$run/ckpt/worker-1" -name 'step-*.ckpt' | sed 's/.*step-0*\([0-9]*\)\.ckpt/\1/' | sort -n | tail -n 1)
echo "torchrun_test: killed worker 1 after its checkpoint of step $killed_at"
kill -0 $w0 2>/dev/null || fail "worker 0 ended before worker 1's restart (the kill came too late to test a restart)"

# torchrun's restart: same RANK/WORLD_SIZE, TORCHELASTIC_RESTART_COUNT=1.
echo "--- restart" >>"$run/worker-1.log"
MASTER_ADDR=10.255.255.2 MASTER_PORT=2 RANK=1 WORLD_SIZE=2 GRADPRESS_SERVER=127.0.0.1:$port \
  TORCHELASTIC_RESTART_COUNT=1 "$launch" --config "$cfg" "${sets[@]}" --run-dir "$run" \
  >>"$run/worker-1.log" 2>&1 &
w1=$!; pids+=($w1)

rc0=0; timeout 300 tail --pid=$w0 -f /dev/null || true; wait $w0 || rc0=$?
rc1=0; timeout 120 tail --pid=$w1 -f /dev/null || true; wait $w1 || rc1=$?
[[ $rc0 -eq 0 ]] || fail "worker 0 exited $rc0"
[[ $rc1 -eq 0 ]] || fail "restarted worker 1 exited $rc1"
grep -q "launch_worker.sh: restart 1: --resume auto --incarnation 2" "$run/worker-1.log" \
  || fail "the wrapper did not add --resume auto --incarnation 2"
sed -n '/--- restart/,$p' "$run/worker-1.log" | grep -Eq "resumed from|continuing from the server's weights" \
  || fail "the restarted worker did not resume"
if grep -q "launch_worker.sh: restart" "$run/worker-0.log"; then fail "restart count 0 added --resume"; fi
[[ -f "$run/summary.json" ]] || fail "no summary.json"
grep -q '"workers": 2' "$run/summary.json" || fail "summary.json: $(cat "$run/summary.json")"
grep -q "done:" "$run/worker-0.log" && sed -n '/--- restart/,$p' "$run/worker-1.log" | grep -q "done:" \
  || fail "a worker did not log done"
kill -TERM $server_pid; wait $server_pid || fail "server exit code $?"
echo "torchrun_test: ok: $(cat "$run/summary.json")"
