#!/usr/bin/env bash
# Container entrypoint for docker/docker-compose.yml (and usable in any container).
#
#   entrypoint.sh server [extra gradpress-server args]
#   entrypoint.sh worker [extra gradpress-worker args]
#   entrypoint.sh rank                  # print the rank this container gets, and exit
#
# Environment: GRADPRESS_CONFIG (the job YAML), WORLD_SIZE (workers), RUN_ID (default
# "default"; the run directory is $GRADPRESS_RUNS/$RUN_ID, GRADPRESS_RUNS default /runs),
# GRADPRESS_PORT (server, default 50051), GRADPRESS_SERVER (workers, default server:50051),
# GRADPRESS_SHARD / GRADPRESS_SHARDS (server: shard i of S, log server-<i>.log) and
# GRADPRESS_SERVERS (workers: every shard, docker-compose.shards.yml),
# RANK, else JOB_COMPLETION_INDEX (Kubernetes Indexed Job) (workers: skip the assignment below;
# starts are then counted per rank in $RUN_DIR/ranks/rank-<RANK>.starts).
#
# Rank assignment (`docker compose up --scale worker=N`, no hand editing): an atomic counter
# under the shared runs volume. Each worker takes a lock (flock) on $RUN_DIR/ranks/.lock and, if
# its hostname (the container id, stable across restarts of that container) has no rank yet,
# takes the next free number. Chosen over the order of the service's IPs in DNS, which changes
# while replicas are still starting, and over the replica number in the container's name,
# which a container cannot read without the Docker socket. The registry belongs to one job:
# start a new job with a new RUN_ID (or `down -v`), or extra containers get rank >= WORLD_SIZE
# and stop with a message saying so.
# A worker container that restarts (restart: on-failure) finds its rank in the registry and is
# launched through launch_worker.sh with GRADPRESS_RESTART_COUNT = its earlier starts, which
# adds `--resume auto --incarnation <n>`.
set -euo pipefail

mode=${1:-server}
[[ $# -gt 0 ]] && shift
config=${GRADPRESS_CONFIG:-/opt/gradpress/configs/lenet_fmnist_m5.yaml}
world=${WORLD_SIZE:-2}
run_dir=${GRADPRESS_RUNS:-/runs}/${RUN_ID:-default}
[[ "$world" =~ ^[1-9][0-9]*$ ]] || { echo "entrypoint: WORLD_SIZE '$world' is not a positive integer" >&2; exit 2; }
mkdir -p "$run_dir"

# Prints "<rank> <earlier starts of this container>". $1: a given rank, if any.
assign_rank() {
  # $HOSTNAME (bash): the `hostname` program is not in a minimal bookworm image.
  local dir=$run_dir/ranks me=${GRADPRESS_HOSTNAME:-${HOSTNAME:-$(cat /etc/hostname)}} given=${1:-}
  if [[ -n "$given" ]]; then
    [[ "$1" =~ ^[0-9]+$ ]] || { echo "entrypoint: rank '$1' is not a number" >&2; exit 2; }
    me=rank-$1
  fi
  mkdir -p "$dir"
  (
    flock -w 60 9 || { echo "entrypoint: cannot lock $dir/.lock" >&2; exit 1; }
    if [[ -n "$given" ]]; then
      echo "$given" >"$dir/$me"
    elif [[ ! -f "$dir/$me" ]]; then
      n=$(find "$dir" -maxdepth 1 -type f ! -name '.*' ! -name '*.starts' ! -name 'rank-*' | wc -l)
      echo "$n" >"$dir/$me"
    fi
    starts=$(cat "$dir/$me.starts" 2>/dev/null || echo 0)
    echo $((starts + 1)) >"$dir/$me.starts"
    echo "$(cat "$dir/$me") $starts"
  ) 9>"$dir/.lock"
}

case "$mode" in
  server)
    log=server.log  # gradpress-server reads GRADPRESS_SHARD(S) itself
    [[ "${GRADPRESS_SHARDS:-1}" != 1 ]] && log=server-${GRADPRESS_SHARD:-0}.log
    exec "${GRADPRESS_SERVER_BIN:-gradpress-server}" --config "$config" \
      --listen "0.0.0.0:${GRADPRESS_PORT:-50051}" --workers "$world" --run-dir "$run_dir" \
      --resume auto --log-file "$run_dir/$log" "$@"
    ;;
  rank)
    assign_rank "${RANK:-${JOB_COMPLETION_INDEX:-}}"
    ;;
  worker)
    starts=0
    read -r rank starts < <(assign_rank "${RANK:-${JOB_COMPLETION_INDEX:-}}")
    [[ -n "${rank:-}" ]] || exit 2
    if (( rank >= world )); then
      echo "entrypoint: this container got rank $rank but WORLD_SIZE is $world: more worker replicas" \
           "than WORLD_SIZE, or $run_dir/ranks is left from another job (use a new RUN_ID)" >&2
      exit 2
    fi
    echo "entrypoint: worker rank $rank of $world, start $((starts + 1)), run dir $run_dir" >&2
    export GRADPRESS_SERVER=${GRADPRESS_SERVER:-server:50051}
    export GRADPRESS_RESTART_COUNT=$starts
    unset TORCHELASTIC_RESTART_COUNT
    # Its output also in the run directory, as scripts/run.sh keeps it (and in `docker logs`).
    exec > >(tee -a "$run_dir/worker-$rank.log") 2>&1
    exec launch_worker.sh --config "$config" --rank "$rank" --workers "$world" \
      --run-dir "$run_dir" "$@"
    ;;
  *) echo "entrypoint: unknown mode '$mode' (server | worker | rank)" >&2; exit 2 ;;
esac
