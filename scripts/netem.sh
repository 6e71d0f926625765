#!/usr/bin/env bash
# Emulated slow links: the server and each worker in its own network namespace, joined in
# one of two topologies (--topology), every link capped with tc tbf at --rate each way:
#   links  (default) each worker has its own veth pair into the server's namespace: the
#          server's bandwidth grows with the workers, as if it had a port per worker.
#   star   every host (the server, each worker) has one veth into a bridge in a switch
#          namespace, capped at both ends: hosts behind a non-blocking switch, so all workers
#          share the server's one link (its NIC), as on a real cluster.
#
#   scripts/netem.sh --rate 100mbit configs/vgg11_cifar10_m1.yaml --max-steps 5  # like run.sh
#   scripts/netem.sh --rate 1gbit --delay-ms 5 --workers 2 CONFIG... [--set k=v]...
#   scripts/netem.sh --rate 100mbit --workers 2 -- CMD ARGS...   # any command, see below
#   scripts/netem.sh --topology star --rate 1gbit --workers 8 --servers 4 -- CMD ARGS...
#   scripts/netem.sh --cleanup         # remove namespaces left by a netem.sh that was SIGKILLed
#
# Link options: --rate R (tc rate: 100mbit, 1gbit, 500kbit; "none" = no cap), --delay-ms D
# and --jitter-ms J (one-way, each direction), --reset-prob P (per forwarded chunk of up to
# 64 KiB, the connection is reset). tc netem does not exist in this kernel: delay, jitter and
# resets come from scripts/faultproxy.py, a TCP proxy in each worker's namespace in front of
# the capped link, used only when one of those three is set. gRPC runs over TCP, which
# retransmits lost packets, so packet loss can only be emulated by its visible effects: delay
# and connection resets. Individual packet drops are not emulated.
#
# Config mode (like scripts/run.sh): one run per config, written to runs/<name>/<timestamp>/
# (config.yaml, server.log, worker-<rank>.log, metrics.jsonl, summary.json) plus link.txt (the
# link settings); then the table (`scripts/run.sh --table DIR...` works on these runs).
# --max-steps K stops each worker after K steps. Defaults added before your --set's:
# server.worker_timeout_s=600, server.deadline_s=900 (a dense VGG11 push takes seconds on a
# slow link). --runs-file F appends each finished run directory to F; --runs-root DIR puts
# the runs under DIR instead of runs/.
#
# Command mode (after --): CMD runs in the host namespace with the links up and these set:
#   NETEM_SERVER_NS    the server's namespace       NETEM_WORKER_NS   the workers', space-separated
#   NETEM_SERVER_IPS   the server's address on each worker's link (space-separated, rank order;
#                      star: the same address for every worker)
#   NETEM_WORKER_IPS   each worker's address          NETEM_RATE       the rate
#   NETEM_TOPOLOGY     links or star
#   NETEM_SHARD_NS     star with --servers S: the S server hosts' namespaces (the first is
#   NETEM_SHARD_IPS    NETEM_SERVER_NS) and their addresses, space-separated
# e.g. `ip netns exec "$NETEM_SERVER_NS" CMD`. netem.sh exits with CMD's status.
#
# Every namespace (and with it its veth ends and qdiscs) is removed on exit, also when a run
# fails or is interrupted; the processes left in them are stopped first. Needs root (or
# CAP_NET_ADMIN + CAP_SYS_ADMIN): ip netns and tc.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/launch.sh

rate=100mbit
topology=links
servers=1
delay_ms=0
jitter_ms=0
reset_prob=0
workers=2
max_steps=""
runs_file=""
runs_root=runs
configs=()
sets=()
cmd=()
cleanup_only=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rate) rate=$2; shift 2 ;;
    --topology) topology=$2; shift 2 ;;
    --servers) servers=$2; shift 2 ;;
    --delay-ms) delay_ms=$2; shift 2 ;;
    --jitter-ms) jitter_ms=$2; shift 2 ;;
    --reset-prob) reset_prob=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --max-steps) max_steps=$2; shift 2 ;;
    --runs-file) runs_file=$2; shift 2 ;;
    --runs-root) runs_root=${2%/}; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    --set=*) sets+=(--set "${1#--set=}"); shift ;;
    --cleanup) cleanup_only=1; shift ;;
    --) shift; cmd=("$@"); break ;;
    -h|--help) sed -n '2,44p' "$0"; exit 0 ;;
    -*) echo "netem.sh: unknown option '$1'" >&2; exit 2 ;;
    *) [[ -f "$1" ]] || { echo "netem.sh: no config file '$1'" >&2; exit 2; }
       configs+=("$1"); shift ;;
  esac
done
[[ "$topology" == links || "$topology" == star ]] || { echo "netem.sh: --topology is links or star, got '$topology'" >&2; exit 2; }
[[ "$servers" =~ ^[1-9][0-9]*$ && $servers -le 64 ]] || { echo "netem.sh: --servers takes 1..64" >&2; exit 2; }
[[ $servers -eq 1 || "$topology" == star ]] || { echo "netem.sh: --servers > 1 needs --topology star" >&2; exit 2; }
[[ "$workers" =~ ^[1-9][0-9]*$ && $workers -le 250 ]] || { echo "netem.sh: --workers takes 1..250" >&2; exit 2; }
[[ -z "$max_steps" || "$max_steps" =~ ^[1-9][0-9]*$ ]] || { echo "netem.sh: --max-steps takes a positive integer" >&2; exit 2; }
for v in "$delay_ms" "$jitter_ms" "$reset_prob"; do
  [[ "$v" =~ ^[0-9]*\.?[0-9]+$ ]] || { echo "netem.sh: '$v' is not a non-negative number" >&2; exit 2; }
done

# Bytes per second of a tc rate ("100mbit", "1gbit", "800kbit", "1000000bit").
rate_bytes() {
  awk -v r="$1" 'BEGIN {
    n = r + 0; u = tolower(substr(r, length(n "") + 1))
    m = (u == "bit") ? 1 : (u == "kbit") ? 1e3 : (u == "mbit") ? 1e6 : (u == "gbit") ? 1e9 : -1
    if (n <= 0 || m < 0) { print 0; exit } print int(n * m / 8) }'
}
if [[ "$rate" != none ]]; then
  rate_b=$(rate_bytes "$rate")
  [[ "$rate_b" -gt 0 ]] || { echo "netem.sh: --rate '$rate' is not <number>bit|kbit|mbit|gbit or none" >&2; exit 2; }
fi

# Namespaces are named gpn-<pid of this script>-s / -w<rank>, so --cleanup can tell whose
# owner is gone.
if [[ $cleanup_only -eq 1 ]]; then
  for ns in $(ip netns list 2>/dev/null | awk '/^gpn-[0-9]+-/ {print $1}'); do
    owner=$(echo "$ns" | cut -d- -f2)
    if ! kill -0 "$owner" 2>/dev/null; then
      for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
      ip netns del "$ns" && echo "netem.sh: removed stale namespace $ns"
    fi
  done
  exit 0
fi

if [[ ${#cmd[@]} -eq 0 && ${#configs[@]} -eq 0 ]]; then
  echo "netem.sh: give config files (server + workers) or -- CMD (see --help)" >&2; exit 2
fi
if ! ip netns add "gpn-$$-probe" 2>/dev/null; then
  echo "netem.sh: cannot create network namespaces (needs root or CAP_NET_ADMIN/CAP_SYS_ADMIN)" >&2
  exit 77
fi
ip netns del "gpn-$$-probe"

id=$$
server_ns=gpn-$id-s
worker_ns=()
server_ips=()
worker_ips=()
namespaces=()
children=()
faults=0
[[ "$delay_ms" != 0 || "$jitter_ms" != 0 || "$reset_prob" != 0 ]] && faults=1

stop_ns() {  # all processes left in namespace $1, TERM then KILL
  local ns=$1 p left
  for p in $(ip netns pids "$ns" 2>/dev/null); do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 50); do
    left=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -z "$left" ]] && return 0
    sleep 0.1
  done
  for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
}
teardown() {
  local rc=$? ns
  trap - EXIT INT TERM
  # Workers first (each finishes its step), then the server, then anything else.
  for ((i = ${#namespaces[@]} - 1; i >= 0; i--)); do stop_ns "${namespaces[$i]}"; done
  for p in "${children[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${children[@]}"; do wait "$p" 2>/dev/null || true; done
  for ns in "${namespaces[@]}"; do
    ip netns del "$ns" 2>/dev/null || echo "netem.sh: could not remove namespace $ns" >&2
  done
  exit "$rc"
}
trap teardown EXIT
trap 'echo "netem.sh: interrupted" >&2; exit 130' INT TERM

cap_link() {  # namespace, device
  [[ "$rate" == none ]] && return 0
  # burst: 4 ms at the rate, at least 64 KiB (one GSO segment); queue: 50 ms at the rate.
  local burst=$(( rate_b / 250 > 65536 ? rate_b / 250 : 65536 ))
  ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$rate" burst "$burst" latency 50ms
}

ip netns add "$server_ns"
namespaces+=("$server_ns")
ip -n "$server_ns" link set lo up
for ((r = 0; r < workers; r++)); do
  ns=gpn-$id-w$r
  ip netns add "$ns"
  namespaces+=("$ns")
  worker_ns+=("$ns")
  ip -n "$ns" link set lo up
done

if [[ "$topology" == links ]]; then
  for ((r = 0; r < workers; r++)); do
    a=gp${id}s$r b=gp${id}w$r
    a=${a:0:15} b=${b:0:15}
    ip link add "$a" type veth peer name "$b"
    ip link set "$a" netns "$server_ns"
    ip link set "$b" netns "${worker_ns[$r]}"
    sip=10.213.$r.1 wip=10.213.$r.2
    ip -n "$server_ns" addr add "$sip/24" dev "$a"
    ip -n "${worker_ns[$r]}" addr add "$wip/24" dev "$b"
    ip -n "$server_ns" link set "$a" up
    ip -n "${worker_ns[$r]}" link set "$b" up
    cap_link "$server_ns" "$a"
    cap_link "${worker_ns[$r]}" "$b"
    server_ips+=("$sip")
    worker_ips+=("$wip")
  done
else
  switch_ns=gpn-$id-x
  ip netns add "$switch_ns"
  namespaces=("$switch_ns" "${namespaces[@]}")  # torn down last
  ip -n "$switch_ns" link add br0 type bridge
  ip -n "$switch_ns" link set br0 up
  # Host k (0: the server, 1 + r: worker r): one veth into the bridge, capped at the host's
  # end (its uplink) and at the switch's port (its downlink).
  attach() {  # namespace, host index, address
    local h=gp${id}h$2 p=gp${id}p$2
    h=${h:0:15} p=${p:0:15}
    ip link add "$h" type veth peer name "$p"
    ip link set "$h" netns "$1"
    ip link set "$p" netns "$switch_ns"
    ip -n "$switch_ns" link set "$p" master br0
    ip -n "$switch_ns" link set "$p" up
    ip -n "$1" addr add "$3/16" dev "$h"
    ip -n "$1" link set "$h" up
    cap_link "$1" "$h"
    cap_link "$switch_ns" "$p"
  }
  attach "$server_ns" 0 10.214.0.1
  shard_ns=("$server_ns")
  shard_ips=(10.214.0.1)
  for ((s = 1; s < servers; s++)); do  # more server hosts (shards), each with its own link
    ns=gpn-$id-s$s
    ip netns add "$ns"
    namespaces+=("$ns")
    ip -n "$ns" link set lo up
    attach "$ns" "s$s" "10.214.0.$((s + 1))"
    shard_ns+=("$ns")
    shard_ips+=("10.214.0.$((s + 1))")
  done
  for ((r = 0; r < workers; r++)); do
    attach "${worker_ns[$r]}" $((r + 1)) "10.214.1.$((r + 1))"
    server_ips+=(10.214.0.1)
    worker_ips+=("10.214.1.$((r + 1))")
  done
fi
echo "netem.sh: $topology topology, $workers worker(s), links of ${rate} each way (tc tbf)$(
  [[ $faults -eq 1 ]] && echo ", fault proxy: delay ${delay_ms} ms + jitter < ${jitter_ms} ms, reset probability ${reset_prob}/chunk")" >&2

# A fault proxy in worker r's namespace: 127.0.0.1:<port> there -> the server over the link.
start_proxy() {  # rank, server port, log; prints the address the worker should use
  local r=$1 port=$2 log=$3 lport=$((20000 + r))
  ip netns exec "${worker_ns[$r]}" python3 scripts/faultproxy.py --listen "127.0.0.1:$lport" \
    --connect "${server_ips[$r]}:$port" --delay-ms "$delay_ms" --jitter-ms "$jitter_ms" \
    --reset-prob "$reset_prob" --seed "$r" >>"$log" 2>&1 &
  children+=($!)
  for _ in $(seq 50); do
    grep -q "faultproxy: 127" "$log" 2>/dev/null && break
    sleep 0.1
  done
  echo "127.0.0.1:$lport"
}

if [[ ${#cmd[@]} -gt 0 ]]; then
  export NETEM_SERVER_NS=$server_ns NETEM_WORKER_NS="${worker_ns[*]}" \
    NETEM_SERVER_IPS="${server_ips[*]}" NETEM_WORKER_IPS="${worker_ips[*]}" NETEM_RATE=$rate \
    NETEM_TOPOLOGY=$topology NETEM_SHARD_NS="${shard_ns[*]:-$server_ns}" \
    NETEM_SHARD_IPS="${shard_ips[*]:-${server_ips[0]:-}}"
  rc=0
  "${cmd[@]}" || rc=$?
  exit "$rc"
fi

# Config mode.
BUILD_DIR=${BUILD_DIR:-build}
server_bin=$BUILD_DIR/server/gradpress-server
worker_bin=$BUILD_DIR/worker/gradpress-worker
if [[ "${NETEM_NO_BUILD:-0}" != 1 ]]; then  # the test sets it: ctest has built them
  if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
    bash scripts/setup.sh >/dev/null
    cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
  fi
  cmake --build "$BUILD_DIR" -j "${JOBS:-2}" --target gradpress-server gradpress-worker >/dev/null
fi
[[ -x "$server_bin" && -x "$worker_bin" ]] || { echo "netem.sh: $server_bin or $worker_bin missing" >&2; exit 1; }
all_sets=(--set server.worker_timeout_s=600 --set server.deadline_s=900 "${sets[@]}")
steps_arg=()
[[ -n "$max_steps" ]] && steps_arg=(--max-steps "$max_steps")

run_dirs=()
for cfg in "${configs[@]}"; do
  name=$(sed -n 's/^name:[[:space:]]*\([^[:space:]#]*\).*/\1/p' "$cfg" | head -1)
  run_dir=$runs_root/${name:-run}/$(date +%Y%m%d-%H%M%S)
  while [[ -e "$run_dir" ]]; do sleep 1; run_dir=$runs_root/${name:-run}/$(date +%Y%m%d-%H%M%S); done
  mkdir -p "$run_dir"
  printf 'rate: %s\ntopology: %s\ndelay_ms: %s\njitter_ms: %s\nreset_prob: %s\nworkers: %s\nmax_steps: %s\n' \
    "$rate" "$topology" "$delay_ms" "$jitter_ms" "$reset_prob" "$workers" "${max_steps:-none}" >"$run_dir/link.txt"
  echo "== $cfg -> $run_dir ($workers workers, $rate links)" >&2
  ip netns exec "$server_ns" "$server_bin" --config "$cfg" "${all_sets[@]}" --listen 0.0.0.0:0 \
    --workers "$workers" --run-dir "$run_dir" --log-file "$run_dir/server.log" \
    >"$run_dir/server.out" 2>&1 &
  server_pid=$!
  children+=("$server_pid")
  port=$(gp_server_port "$run_dir" "$server_pid") || { echo "netem.sh: server did not start" >&2; exit 1; }
  worker_pids=()
  for ((r = 0; r < workers; r++)); do
    addr=${server_ips[$r]}:$port
    [[ $faults -eq 1 ]] && addr=$(start_proxy "$r" "$port" "$run_dir/faultproxy-$r.log")
    ip netns exec "${worker_ns[$r]}" "$worker_bin" --config "$cfg" "${all_sets[@]}" --rank "$r" \
      --workers "$workers" --server "$addr" --run-dir "$run_dir" "${steps_arg[@]}" \
      >>"$run_dir/worker-$r.log" 2>&1 &
    worker_pids+=($!)
    children+=($!)
  done
  gp_follow "$run_dir" "${worker_pids[0]}"
  failed=0
  gp_wait_workers netem.sh "$run_dir" "${worker_pids[@]}" || failed=1
  gp_stop_server "$server_pid"
  for ns in "${worker_ns[@]}"; do stop_ns "$ns"; done  # fault proxies
  children=()
  [[ $failed -eq 0 ]] || exit 1
  run_dirs+=("$run_dir")
  [[ -n "$runs_file" ]] && echo "$run_dir" >>"$runs_file"
done
bash scripts/run.sh --table "${run_dirs[@]}"
