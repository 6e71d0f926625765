#!/usr/bin/env bash
# scripts/slurm/gradpress.sbatch on a real one-node Slurm cluster on this machine: starts
# munged, slurmctld and slurmd (slurm-wlm and munge, which scripts/setup.sh installs; a test
# installs nothing) with a generated slurm.conf in a temp dir, submits a 1-epoch LeNet job on a
# Fashion-MNIST subset (server + 2 workers = 3 tasks) with `sbatch --wait`, checks exit 0 and
# summary.json, and stops the daemons it started (by pid). Where Slurm is missing or cannot
# start, it says so loudly and exits 77 (ctest: skipped).
#   slurm_test.sh SOURCE_DIR SERVER_BIN WORKER_BIN
set -euo pipefail
src=$1; server_bin=$2; worker_bin=$3
SKIP=77
tmp=$(mktemp -d /tmp/gp-slurm.XXXXXX)
chmod 755 "$tmp"
started=()
cleanup() {
  for p in "${started[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${started[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
skip() {
  echo "########################################################################"
  echo "slurm_test: SKIPPED: $*"
  echo "scripts/slurm/gradpress.sbatch was NOT run under Slurm"
  echo "########################################################################"
  for f in "$tmp"/*.log; do [[ -f "$f" ]] && { echo "--- $f"; tail -n 15 "$f"; }; done
  exit $SKIP
}
fail() {
  echo "slurm_test: FAIL: $*" >&2
  for f in "$tmp"/*.log "$tmp"/job/*.out "$tmp"/job/runs/*/*.log "$tmp"/job/runs/*/server.out; do
    [[ -f "$f" ]] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }
  done
  exit 1
}

for b in munge unmunge munged slurmctld slurmd sbatch scontrol sinfo; do
  command -v "$b" >/dev/null || skip "$b not found (slurm-wlm and munge: bash scripts/setup.sh)"
done

# munge: reuse a running munged, else start one (as root: --force, own socket dir).
if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
  [[ -s /etc/munge/munge.key ]] || /usr/sbin/mungekey --create >"$tmp/munge.log" 2>&1 || true
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
  munged --force --foreground >"$tmp/munge.log" 2>&1 &
  started+=($!)
  for _ in $(seq 50); do munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  munge -n </dev/null | unmunge >/dev/null 2>&1 || skip "munged did not start"
fi

# slurm.conf for a one-node cluster on free ports, all state in $tmp.
free_port() { while :; do p=$(( (RANDOM % 20000) + 20000 )); ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && { echo $p; return; }; done; }
ctld_port=$(free_port); slurmd_port=$(free_port)
while [[ $slurmd_port -eq $ctld_port ]]; do slurmd_port=$(free_port); done
mkdir -p "$tmp/state" "$tmp/spool" "$tmp/job"
cat >"$tmp/slurm.conf" <<CONF
ClusterName=gptest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdTimeout=60
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=gp Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF=$tmp/slurm.conf
slurmctld -D -f "$SLURM_CONF" >"$tmp/slurmctld.stdout.log" 2>&1 &
started+=($!)
slurmd -D -f "$SLURM_CONF" -N localhost >"$tmp/slurmd.stdout.log" 2>&1 &
started+=($!)
state=""
for _ in $(seq 60); do
  state=$(sinfo -h -N -o '%T' 2>/dev/null | head -n 1 || true)
  [[ "$state" == idle* ]] && break
  for p in "${started[@]}"; do kill -0 "$p" 2>/dev/null || skip "a Slurm daemon exited (state '$state')"; done
  sleep 1
done
[[ "$state" == idle* ]] || skip "the node did not become idle in 60 s (state '$state')"
echo "slurm_test: one-node Slurm up ($(sinfo -V)), node state $state"

# The job: 1 epoch of LeNet on 1024 Fashion-MNIST images, 2 workers (3 tasks on 2 CPUs: -O).
cd "$tmp/job"
rc=0
timeout 420 sbatch --wait -O --ntasks=3 --time=8 \
  --output="$tmp/job/slurm-%j.out" \
  --export=ALL,BUILD_DIR=$(dirname "$(dirname "$server_bin")") \
  "$src/scripts/slurm/gradpress.sbatch" "$src/configs/lenet_fmnist_m5.yaml" \
  --set train.epochs=1 --set dataset.subset=1024 --set dataset.test_subset=512 \
  >"$tmp/sbatch.log" 2>&1 || rc=$?
cat "$tmp/sbatch.log"
cat "$tmp"/job/slurm-*.out 2>/dev/null || true
[[ $rc -eq 0 ]] || fail "sbatch --wait exited $rc"
summary=$(ls "$tmp"/job/runs/slurm-*/summary.json 2>/dev/null | head -n 1)
[[ -n "$summary" ]] || fail "no summary.json under $tmp/job/runs"
grep -q '"test_acc"' "$summary" || fail "summary.json has no test_acc: $(cat "$summary")"
run=$(dirname "$summary")
for r in 0 1; do grep -q "done:" "$run/worker-$r.log" || fail "worker $r did not finish"; done
grep -q '"workers": 2' "$summary" || fail "summary.json does not say 2 workers: $(cat "$summary")"
echo "slurm_test: one server: $(cat "$summary")"

# The same job on 2 server shards (tasks 0-1) and 2 workers (tasks 2-3).
rc=0
GRADPRESS_SHARDS=2 timeout 420 sbatch --wait -O --ntasks=4 --time=8 \
  --output="$tmp/job/slurm-shards-%j.out" \
  --export=ALL,BUILD_DIR=$(dirname "$(dirname "$server_bin")"),GRADPRESS_RUN_DIR=$tmp/job/runs/shards \
  "$src/scripts/slurm/gradpress.sbatch" "$src/configs/lenet_fmnist_m5.yaml" \
  --set train.epochs=1 --set dataset.subset=1024 --set dataset.test_subset=512 \
  >"$tmp/sbatch2.log" 2>&1 || rc=$?
cat "$tmp/sbatch2.log"
cat "$tmp"/job/slurm-shards-*.out 2>/dev/null || true
[[ $rc -eq 0 ]] || fail "sharded sbatch --wait exited $rc"
run=$tmp/job/runs/shards
[[ -f "$run/summary.json" ]] || fail "no summary.json in $run"
for s in 0 1; do
  [[ -s "$run/server-$s.addr" ]] || fail "shard $s published no address"
  grep -q "shard $s of 2" "$run/server-$s.log" || fail "server-$s.log does not say shard $s of 2"
  [[ -d "$run/ckpt/server-$s" ]] || fail "no checkpoints of shard $s"
done
for r in 0 1; do grep -q "done:" "$run/worker-$r.log" || fail "worker $r of the sharded job did not finish"; done
echo "slurm_test: ok: 2 shards: $(cat "$run/summary.json")"
