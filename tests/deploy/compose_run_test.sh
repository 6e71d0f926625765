#!/usr/bin/env bash
# docker-compose jobs in real containers (ctest label "docker"): scripts/docker.sh starts
# dockerd if none answers, makes the local debian:bookworm base and packs BUILD_DIR's binaries
# into gradpress-server / gradpress (the fast image path); then, LeNet method 5 on
# Fashion-MNIST with 2 workers (COMPOSE_TEST_SETS: the --set flags, a few hundred steps):
#   host     the same binaries (copied out of the image) launched as scripts/run.sh does
#   clean    `docker-compose up --scale worker=2`: summary.json and metrics.jsonl in the runs
#            volume; test accuracy and bytes per step equal the host run's (bit for bit: the
#            seeds, batches and binaries are the same); `docker stop` of the server: exit 0
#   sstop    `docker stop` of the server mid-run: exit 0 and a final checkpoint within the
#            grace period; `docker start` resumes from it and the job completes
#   wkill    a worker container's process SIGKILLed mid-run (a crash): its restart policy
#            restarts it, it rejoins (--resume auto --incarnation 2) and the job completes
#            within 0.5 points of clean; and `docker kill` is shown to bypass that policy
#   skill    the server container's process SIGKILLed after a checkpoint: restarted by its
#            policy, it resumes its newest checkpoint, the workers register again, the job
#            completes within 0.5 points of clean
#   dkill    `docker kill` of a worker: Docker does not apply the restart policy to it (a stop
#            by hand); `docker start` brings it back and it rejoins
#   shards   docker-compose.shards.yml layered on: two server containers
# Exit 77 (skipped) with the reason when no Docker daemon answers and none can be started
# (docker.io not installed, not root). A daemon this test started is stopped at its end.
#   compose_run_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
tmp=$(mktemp -d /var/tmp/gp-compose-test.XXXXXX)
project=gptest$$
ds=$src/scripts/docker.sh
started=0
say() { echo "compose_run_test: $*"; }
fail() { echo "compose_run_test: FAIL: $*" >&2; exit 1; }
skip() {
  echo "########################################################################"
  echo "compose_run_test: SKIPPED: $*"
  echo "  (run it where Docker can start: as root, apt-get install docker.io, then"
  echo "   bash tests/deploy/compose_run_test.sh . build)"
  echo "########################################################################"
  exit 77
}
dk() { if [[ -x /usr/bin/docker ]]; then /usr/bin/docker "$@"; else docker "$@"; fi; }
export DOCKER_BUILDKIT=0

# -- a daemon, or the reason there is none.
if ! { [[ -x /usr/bin/docker ]] || command -v docker >/dev/null; } || ! dk info >/dev/null 2>&1; then
  command -v dockerd >/dev/null || skip "no Docker daemon answers and dockerd is not installed (Debian: docker.io)"
  [[ $(id -u) -eq 0 ]] || skip "no Docker daemon answers and starting dockerd needs root"
  started=1
fi
command -v docker-compose >/dev/null || skip "docker-compose not found (scripts/setup.sh installs it)"

compose_files=(-f "$src/docker/docker-compose.yml")
compose() { docker-compose -p "$project" "${compose_files[@]}" "$@"; }
cleanup() {
  local rc=$?
  if dk info >/dev/null 2>&1; then
    compose_files=(-f "$src/docker/docker-compose.yml" -f "$src/docker/docker-compose.shards.yml")
    compose down -v -t 5 >/dev/null 2>&1 || true
  fi
  for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done
  (( started )) && bash "$ds" stop || true
  [[ -n "${COMPOSE_TEST_KEEP:-}" ]] && echo "compose_run_test: kept $tmp" || rm -rf "$tmp"
  exit $rc
}
trap cleanup EXIT
if (( started )); then
  bash "$ds" start || skip "dockerd could not be started (see above)"
fi

# -- images: the base, then the fast path from BUILD_DIR.
t0=$SECONDS
bash "$ds" base || fail "scripts/docker.sh base"
t_base=$((SECONDS - t0)); t0=$SECONDS
bash "$ds" images --build-dir "$build" || fail "scripts/docker.sh images"
t_images=$((SECONDS - t0))
server_size=$(dk image inspect -f '{{.Size}}' gradpress-server)
runtime_size=$(dk image inspect -f '{{.Size}}' gradpress)
if dk run --rm --network none --entrypoint sh gradpress-server -c 'ls /usr/lib/x86_64-linux-gnu | grep -q libtorch'; then
  fail "the server image holds LibTorch"
fi
say "base ${t_base} s, fast images ${t_images} s; gradpress-server $((server_size / 1000000)) MB (no LibTorch), gradpress $((runtime_size / 1000000)) MB"

# The binaries in the image, for the host run.
mkdir -p "$tmp/bin"
cid=$(dk create gradpress)
for b in gradpress-server gradpress-worker; do dk cp "$cid:/usr/local/bin/$b" "$tmp/bin/$b"; done
dk rm "$cid" >/dev/null

# -- the job's config: method 5, checkpoints every 50 steps.
# shellcheck disable=SC2206
# Two epochs of the whole set at lr 0.02 (938 steps): seeds 42 and 43 end 0.7 points apart
# here, earlier stops (400 steps) several points, too noisy for a 0.5-point check.
sets=(${COMPOSE_TEST_SETS:---set train.epochs=2 --set train.lr=0.02 --set train.checkpoint_every=50 --set train.log_every=100 --set device=cpu})
"$tmp/bin/gradpress-worker" --config "$src/configs/lenet_fmnist_m5.yaml" "${sets[@]}" --print-config >"$tmp/job.yaml" ||
  fail "the job's config does not resolve"
say "job: LeNet method 5, 2 workers, ${sets[*]}"

field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
vm_hwm_kb() { awk '/^VmHWM/ {print $2}' "/proc/$1/status"; }

# -- host: scripts/run.sh's launch (server on 127.0.0.1:0, workers --rank r --workers 2).
host=$tmp/host
mkdir -p "$host"
t0=$SECONDS
"$tmp/bin/gradpress-server" --config "$tmp/job.yaml" --listen 127.0.0.1:0 --workers 2 --shard 0 --shards 1 \
  --run-dir "$host" --log-file "$host/server.log" >"$host/server.out" 2>&1 &
spid=$!
source "$src/scripts/lib/launch.sh"
port=$(gp_server_port "$host" "$spid") || fail "host server did not start"
wpids=()
for r in 0 1; do
  "$tmp/bin/gradpress-worker" --config "$tmp/job.yaml" --rank $r --workers 2 --server "127.0.0.1:$port" \
    --run-dir "$host" >"$host/worker-$r.log" 2>&1 &
  wpids+=($!)
done
gp_wait_workers compose_run_test "$host" "${wpids[@]}" || fail "host job failed"
host_rss=$(vm_hwm_kb "$spid")
kill -TERM "$spid"; wait "$spid" || true
host_acc=$(field "$host/summary.json" test_acc)
host_up=$(field "$host/summary.json" bytes_up_per_step)
host_down=$(field "$host/summary.json" bytes_down_per_step)
total=$(field "$host/summary.json" steps)
say "host: $total steps, test_acc $host_acc, $host_up B up / $host_down B down per step, $((SECONDS - t0)) s, server peak RSS $((host_rss / 1024)) MB"

# -- compose helpers.
volume_dir() { dk volume inspect -f '{{.Mountpoint}}' "${project}_runs"; }
cids() { dk ps -aq --filter "label=com.docker.compose.project=$project" --filter "label=com.docker.compose.service=$1" | sort; }
# Waits (deadline $2 s) until the command $1 succeeds.
wait_for() {
  local what=$1 deadline=$((SECONDS + $2))
  until eval "$what"; do
    (( SECONDS < deadline )) || return 1
    sleep 0.2
  done
}
workers_exited() {
  local ids
  ids=$(cids worker)
  [[ $(wc -w <<<"$ids") -eq 2 ]] || return 1
  [[ -z $(dk inspect -f '{{.State.Status}}' $ids | grep -vx exited) ]]
}
# Steps finished by worker 0 (rows of rank 0 in metrics.jsonl).
steps_done() {
  local n
  n=$(grep -c '"rank": 0,' "$(volume_dir)/$RUN_ID/metrics.jsonl" 2>/dev/null) || true
  echo "${n:-0}"
}
# Starts a job; returns when both worker containers have exited 0 (deadline 600 s).
start_job() {  # RUN_ID
  export RUN_ID=$1 WORLD_SIZE=2 GRADPRESS_CONFIG_FILE=$tmp/job.yaml
  compose up -d --no-build --scale worker=2 >"$tmp/$1.up.log" 2>&1 || { cat "$tmp/$1.up.log"; fail "$1: compose up"; }
}
finish_job() {  # RUN_ID: waits for the workers, checks their exits, copies the run dir out
  wait_for workers_exited 600 || { compose logs --tail 30; fail "$1: the workers did not finish in 600 s"; }
  local bad
  bad=$(dk inspect -f '{{.Name}} exit {{.State.ExitCode}}' $(cids worker) | grep -v 'exit 0$' || true)
  [[ -z "$bad" ]] || { compose logs --tail 30; fail "$1: $bad"; }
  cp -r "$(volume_dir)/$1" "$tmp/$1"
  [[ -f "$tmp/$1/summary.json" && -s "$tmp/$1/metrics.jsonl" ]] || fail "$1: no summary.json or metrics.jsonl in the runs volume"
}
end_job() { compose down -t 30 >/dev/null 2>&1; }

# -- clean: the compose job, then `docker stop` of the server.
t0=$SECONDS
start_job clean
finish_job clean
t_clean=$((SECONDS - t0))
srv=$(cids server)
srv_rss=$(vm_hwm_kb "$(dk inspect -f '{{.State.Pid}}' "$srv")")
t0=$(date +%s.%N)
dk stop -t 30 "$srv" >/dev/null
t_stop=$(python3 -c "import time; print(f'{time.time() - $t0:.2f}')")
[[ $(dk inspect -f '{{.State.ExitCode}}' "$srv") == 0 ]] || fail "docker stop: server exit $(dk inspect -f '{{.State.ExitCode}}' "$srv"), not 0"
python3 -c "import sys; sys.exit(0 if $t_stop < 30 else 1)" || fail "docker stop took $t_stop s (grace period 30 s)"
grep -q "signal 15: stopping" "$(volume_dir)/clean/server.log" || fail "the server's log does not show SIGTERM"
[[ -f "$(volume_dir)/clean/ckpt/server/step-$(printf %012d "$total").ckpt" ]] || fail "no server checkpoint of step $total"
say "docker stop server (job done): exit 0 in $t_stop s (grace 30 s), checkpoint of step $total"
end_job
acc=$(field "$tmp/clean/summary.json" test_acc)
up=$(field "$tmp/clean/summary.json" bytes_up_per_step)
down=$(field "$tmp/clean/summary.json" bytes_down_per_step)
steps=$(field "$tmp/clean/summary.json" steps)
[[ "$steps" == "$total" ]] || fail "clean: $steps steps, expected $total"
say "compose: test_acc $acc, $up B up / $down B down per step, $t_clean s; server container peak RSS $((srv_rss / 1024)) MB"
# Bit for bit: same binaries, seeds and batches. metrics.jsonl's losses and bytes too.
same_steps=$(python3 - "$host/metrics.jsonl" "$tmp/clean/metrics.jsonl" <<'PY'
import json, sys
def rows(p):
    return {(r["rank"], r["step"]): (r["loss"], r["bytes_up"], r["bytes_down"])
            for r in map(json.loads, open(p)) if "loss" in r}
a, b = rows(sys.argv[1]), rows(sys.argv[2])
print(sum(1 for k in a if b.get(k) == a[k]), len(a))
PY
)
if [[ "$acc|$up|$down" == "$host_acc|$host_up|$host_down" ]]; then
  say "compose = host bit for bit: test_acc, bytes per step; metrics rows (loss, bytes) equal: $same_steps"
else
  fail "compose ($acc, $up, $down) differs from host ($host_acc, $host_up, $host_down); equal metrics rows: $same_steps"
fi

within() { python3 -c "import sys; sys.exit(0 if abs($1 - $2) <= 0.005 else 1)"; }
# An accuracy off by more than 0.5 points fails the test at its end, after every scenario ran.
acc_failures=()
check_acc() {  # NAME ACC
  if within "$2" "$acc"; then say "$1: completed, test_acc $2 (clean $acc)"
  else acc_failures+=("$1: test_acc $2, clean $acc"); say "$1: completed, but test_acc $2 is more than 0.5 points from clean $acc"; fi
}

# -- wkill: `docker kill` is a manual stop (no restart); a crash (SIGKILL of the container's
# process from outside, as the OOM killer does) is restarted by `restart: on-failure`.
start_job wkill
# Just after a checkpoint: the restarted worker's optimizer state and residuals are 5 steps old.
kill_at=$(( total / 2 / 50 * 50 + 5 ))
wait_for '[[ $(steps_done) -ge $kill_at ]]' 300 || fail "wkill: the job did not reach step $kill_at"
victim=$(cids worker | head -1)
at=$(steps_done)
kill -KILL "$(dk inspect -f '{{.State.Pid}}' "$victim")"
wait_for '[[ $(dk inspect -f "{{.RestartCount}}" '"$victim"') -ge 1 ]]' 60 || fail "wkill: the killed worker was not restarted by its policy"
say "wkill: worker $(dk inspect -f '{{.Name}}' "$victim") SIGKILLed at step $at, restarted by restart: on-failure"
finish_job wkill
grep -q "incarnation 2\|restart 1" "$tmp/wkill"/worker-*.log || fail "wkill: no restarted worker in the logs"
wacc=$(field "$tmp/wkill/summary.json" test_acc)
say "wkill: each worker's final test_acc: $(for r in 0 1; do grep -o 'worker-[01] epoch [0-9]* train_acc [0-9.]* test_acc [0-9.]*' "$tmp/wkill/worker-$r.log" | tail -n 1 | awk '{printf "%s %s ", $1, $NF}'; done)"
end_job
check_acc wkill "$wacc"

# -- skill: the server's process SIGKILLed after a checkpoint; restarted, it resumes.
start_job skill
wait_for '[[ $(steps_done) -ge $kill_at ]]' 300 || fail "skill: the job did not reach step $kill_at"
srv=$(cids server)
at=$(steps_done)
kill -KILL "$(dk inspect -f '{{.State.Pid}}' "$srv")"
wait_for '[[ $(dk inspect -f "{{.RestartCount}}" '"$srv"') -ge 1 ]]' 60 || fail "skill: the server was not restarted by its policy"
say "skill: server SIGKILLed at step $at, restarted by restart: on-failure"
finish_job skill
# The workers are told why they must register again (the server's own log is still buffered).
resumed=$(grep -ho "the server restarted from its checkpoint of step [0-9]*" "$tmp"/skill/worker-*.log | head -1)
[[ -n "$resumed" ]] || fail "skill: no worker was told that the server restarted from a checkpoint"
say "skill: $resumed; both workers registered again"
sacc=$(field "$tmp/skill/summary.json" test_acc)
end_job
check_acc skill "$sacc"

# -- sstop: `docker stop` of the server mid-run: a final checkpoint within the grace period;
# `docker start` of the same container resumes from it and the job completes.
start_job sstop
wait_for '[[ $(steps_done) -ge $((total / 2 + 20)) ]]' 300 || fail "sstop: the job did not reach step $((total / 2 + 20))"
srv=$(cids server)
at=$(steps_done)
t0=$(date +%s.%N)
dk stop -t 30 "$srv" >/dev/null
t_stop2=$(python3 -c "import time; print(f'{time.time() - $t0:.2f}')")
[[ $(dk inspect -f '{{.State.ExitCode}}' "$srv") == 0 ]] || fail "sstop: server exit $(dk inspect -f '{{.State.ExitCode}}' "$srv") after docker stop"
python3 -c "import sys; sys.exit(0 if $t_stop2 < 30 else 1)" || fail "sstop: docker stop took $t_stop2 s (grace 30 s)"
final=$(sed -n 's/.*final checkpoint: \(.*\)/\1/p' "$(volume_dir)/sstop/server.log" | tail -1)
[[ -n "$final" && -f "$(volume_dir)/${final#/runs/}" ]] || fail "sstop: no final checkpoint after docker stop (log: '$final')"
say "sstop: docker stop at step $at: exit 0 in $t_stop2 s (grace 30 s), final checkpoint ${final##*/}"
dk start "$srv" >/dev/null
finish_job sstop
resumed=$(grep -ho "the server restarted from its checkpoint of step [0-9]*" "$tmp"/sstop/worker-*.log | head -1)
[[ "$resumed" == *" step $((10#$(basename "$final" .ckpt | sed 's/^step-//')))" ]] ||
  fail "sstop: the started server did not resume its final checkpoint ${final##*/} (workers were told: '$resumed')"
say "sstop: docker start: $resumed"
tacc=$(field "$tmp/sstop/summary.json" test_acc)
end_job
check_acc sstop "$tacc"

# -- `docker kill` of a worker: Docker treats it as stopped by hand, the policy does not apply.
start_job dkill
wait_for '[[ $(steps_done) -ge 20 ]]' 300 || fail "dkill: the job did not start"
victim=$(cids worker | head -1)
dk kill "$victim" >/dev/null
if wait_for '[[ $(dk inspect -f "{{.RestartCount}}" '"$victim"') -ge 1 ]]' 10; then
  say "dkill: docker kill restarted by the policy (this Docker applies it)"
else
  say "dkill: docker kill not restarted by the policy (Docker: a manual stop); docker start brings it back"
  dk start "$victim" >/dev/null
fi
finish_job dkill
kacc=$(field "$tmp/dkill/summary.json" test_acc)
end_job
check_acc dkill "$kacc"

# -- shards: the two-server overlay.
compose_files=(-f "$src/docker/docker-compose.yml" -f "$src/docker/docker-compose.shards.yml")
start_job shards
finish_job shards
[[ -f "$tmp/shards/server-0.log" && -f "$tmp/shards/server-1.log" ]] || fail "shards: no server-0.log and server-1.log"
hacc=$(field "$tmp/shards/summary.json" test_acc)
end_job
say "shards: completed on 2 server containers, test_acc $hacc (one server: $acc)"
[[ ${#acc_failures[@]} -eq 0 ]] || fail "more than 0.5 points from the fault-free run: ${acc_failures[*]}"
say "ok"
