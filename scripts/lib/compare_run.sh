#!/usr/bin/env bash
# One run of scripts/compare.sh, inside scripts/netem.sh's links (its command mode: NETEM_*
# set): the workers of examples/torch_compare.py in their namespaces, and for gradpress its
# server in the server's namespace, with the method's job YAML written to DIR/job.yaml.
#
#   compare_run.sh METHOD DIR BUILD PSGD_START [torch_compare.py ARGS...]
#
# Writes DIR/worker-<rank>.log, DIR/server.out (gradpress) and DIR/result.json (rank 0's).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/launch.sh
method=$1 dir=$2 build=$3 psgd_start=$4
shift 4
read -r -a worker_ns <<<"$NETEM_WORKER_NS"
read -r -a server_ips <<<"$NETEM_SERVER_IPS"
read -r -a worker_ips <<<"$NETEM_WORKER_IPS"
world=${#worker_ns[@]}
args=(--out "$dir/result.json" --label "$method" "$@")
rm -f "$dir/result.json"

job_yaml() {  # the gradpress job for METHOD: codecs, sync and (auto) the planner's model
  local push pull exchange=gradients extra=""
  case $method in
    gp-m1) push="{codec: none}"; pull="{codec: none}"; exchange=weights ;;
    gp-m3) push="{codec: none}"; pull="{codec: none}" ;;
    gp-fp16) push="{codec: fp16}"; pull="{codec: fp16}" ;;
    gp-m5|gp-auto)
      push="{codec: topk, ratio: 0.01, then: {codec: qsgd, levels: 16}, error_feedback: true}"
      pull=$push
      extra="compress: {min_numel: 100}" ;;
  esac
  if [[ $method == gp-auto ]]; then
    # compress.auto calibrates the job's model (resnet8 = the script's CNN, the same keys) on
    # the link the job runs on.
    local gbps
    case $NETEM_RATE in
      none) gbps=10 ;;  # uncapped: a fast local link
      *gbit) gbps=${NETEM_RATE%gbit} ;;
      *mbit) gbps=$(awk "BEGIN {print ${NETEM_RATE%mbit} / 1000}") ;;
      *) echo "compare_run.sh: rate '$NETEM_RATE' is not N[mg]bit or none" >&2; exit 2 ;;
    esac
    extra="compress: {min_numel: 100, auto: true, link_gbps: $gbps, topology: star}"
  fi
  cat <<EOF
name: compare-$method
model: $( [[ " $* " == *" vgg11 "* ]] && echo vgg11 || echo resnet8 )
dataset: {name: fashion-mnist, path: /usr/share/datasets/fashion-mnist}
device: cpu
train: {batch_size: 64, lr: 0.05, momentum: 0.9, seed: 42, threads: 1}
cluster: {workers: $world}
sync: {mode: sync, exchange: $exchange, every: 1}
push: $push
pull: $pull
server: {worker_timeout_s: 600, deadline_s: 900}
$extra
EOF
}

pids=()
spid=""
trap 'kill ${pids[*]} $spid 2>/dev/null || true' EXIT
case $method in
  ddp*)
    hook=none rank_psgd=1
    case $method in
      ddp-fp16) hook=fp16 ;;
      ddp-psgd1) hook=powersgd rank_psgd=1 ;;
      ddp-psgd4) hook=powersgd rank_psgd=4 ;;
    esac
    for r in $(seq 0 $((world - 1))); do
      # Gloo listens on the address the host name resolves to (loopback) unless told the link.
      ifname=$(ip netns exec "${worker_ns[r]}" ip -o -4 addr show | awk '$2 != "lo" {print $2; exit}')
      ip netns exec "${worker_ns[r]}" env RANK=$r WORLD_SIZE=$world \
        MASTER_ADDR="${worker_ips[0]}" MASTER_PORT=29500 OMP_NUM_THREADS=1 \
        GLOO_SOCKET_IFNAME="$ifname" \
        /usr/bin/python3 examples/torch_compare.py --backend ddp --hook $hook \
        --rank-psgd $rank_psgd --start-psgd "$psgd_start" "${args[@]}" \
        >"$dir/worker-$r.log" 2>&1 &
      pids+=($!)
    done
    ;;
  gp-*)
    job_yaml "$@" >"$dir/job.yaml"
    ip netns exec "$NETEM_SERVER_NS" "$build/server/gradpress-server" --config "$dir/job.yaml" \
      --listen 0.0.0.0:0 --workers "$world" --log-level warn >"$dir/server.out" 2>&1 &
    spid=$!
    port=$(gp_server_port "$dir" "$spid")
    for r in $(seq 0 $((world - 1))); do
      ip netns exec "${worker_ns[r]}" env RANK=$r WORLD_SIZE=$world \
        GRADPRESS_SERVER="${server_ips[r]}:$port" OMP_NUM_THREADS=1 \
        PYTHONPATH="$build/python:python" /usr/bin/python3 examples/torch_compare.py \
        --backend gradpress --config "$dir/job.yaml" "${args[@]}" >"$dir/worker-$r.log" 2>&1 &
      pids+=($!)
    done
    ;;
esac
gp_wait_workers "$method" "$dir" "${pids[@]}"
pids=()
[[ -n $spid ]] && gp_stop_server "$spid"
spid=""
[[ -s $dir/result.json ]] || { echo "compare_run.sh: rank 0 wrote no result" >&2; exit 1; }
