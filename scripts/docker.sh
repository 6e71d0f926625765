#!/usr/bin/env bash
# Docker on this machine for gradpress: a daemon, the local debian:bookworm base image, the
# gradpress images, and the docker-compose job. Every step says what it does; each is skipped
# when its result is already there (idempotent).
#
#   scripts/docker.sh job [--full] [--shards] [--build-dir DIR] [--config FILE] [--set K=V]...
#                              # all of it from a fresh clone: daemon, base, images, then a
#                              # compose job (2 workers) whose run directory is copied to
#                              # runs/docker/<RUN_ID>/; a daemon it started is stopped after
#   scripts/docker.sh start    # dockerd unless one answers (installs docker.io if missing)
#   scripts/docker.sh base     # debian:bookworm: mmdebstrap --variant=apt + docker import
#   scripts/docker.sh images [--full] [--build-dir DIR]
#                              # gradpress-server (no LibTorch) and gradpress (server, worker,
#                              # sim): by default packed from an existing build tree's binaries
#                              # (docker/Dockerfile.prebuilt, minutes); --full compiles inside
#                              # the image (docker/Dockerfile, ~30+ min on 2 cores)
#   scripts/docker.sh stop     # stop the dockerd this script started (its containers with it)
#   scripts/docker.sh status
#
# Why a daemon of our own: Debian's docker.io (20.10) has no daemon running on CI machines or
# in containers; this script starts `dockerd --storage-driver=vfs` (vfs works on any
# filesystem, overlay-on-overlay does not) with its data root, log and pid file under
# $GRADPRESS_DOCKER_DIR (default /var/tmp/gradpress-docker), and `stop` ends only that daemon.
# No image registry is needed: the base image is made from Debian's archive by mmdebstrap.
# docker.io and mmdebstrap are installed here rather than by scripts/setup.sh, so machines
# that never run Docker (CI) do not get a container engine.
# Needs root to start dockerd or install packages; a daemon that already answers is used as is.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${GRADPRESS_DOCKER_DIR:-/var/tmp/gradpress-docker}
mirror=${GRADPRESS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
build_lock=${GP_BUILD_LOCK-/tmp/gp-build.lock}  # held by whoever rebuilds the build tree
export DOCKER_BUILDKIT=0            # the classic builder (docker.io 20.10 has no buildx)
export COMPOSE_DOCKER_CLI_BUILD=0

say() { echo "docker.sh: $*" >&2; }
die() { echo "docker.sh: ERROR: $*" >&2; exit 1; }

# docker.io's own client (matches the daemon's API) before any other docker on PATH.
docker_cli() {
  if [[ -x /usr/bin/docker ]]; then /usr/bin/docker "$@"; else docker "$@"; fi
}
have_cli() { [[ -x /usr/bin/docker ]] || command -v docker >/dev/null 2>&1; }
daemon_up() { have_cli && docker_cli info >/dev/null 2>&1; }
is_root() { [[ $(id -u) -eq 0 ]]; }

apt_install() {  # PACKAGE... (root only)
  is_root || die "need root to install $* (apt-get); run as root, or install them yourself"
  say "installing $* (apt-get, Debian's archive)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >/dev/null ||
    { say "apt-get install failed; trying apt-get update first";
      apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "$@" >/dev/null; } ||
    die "could not install $*"
}

cmd_start() {
  if daemon_up; then
    say "a Docker daemon answers ($(docker_cli version -f '{{.Server.Version}}' 2>/dev/null)); using it"
    return 0
  fi
  is_root || die "no Docker daemon answers and starting dockerd needs root (run as root, or start Docker yourself)"
  command -v dockerd >/dev/null 2>&1 || apt_install docker.io
  command -v docker-compose >/dev/null 2>&1 || apt_install docker-compose
  mkdir -p "$dir/data"
  say "starting dockerd (storage driver vfs, data $dir/data, log $dir/dockerd.log, pid $dir/dockerd.pid)"
  # setsid: the daemon outlives this script and is not in its process group.
  setsid dockerd --storage-driver=vfs --data-root "$dir/data" --pidfile "$dir/dockerd.pid" \
    >>"$dir/dockerd.log" 2>&1 </dev/null &
  local pid=$! deadline=$((SECONDS + 90))
  echo "$pid" >"$dir/started-by-docker.sh"
  until docker_cli info >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 15 "$dir/dockerd.log" >&2
      rm -f "$dir/started-by-docker.sh"
      die "dockerd exited at start (its log is above, all of it in $dir/dockerd.log)"
    fi
    (( SECONDS < deadline )) || die "dockerd (pid $pid) does not answer after 90 s; see $dir/dockerd.log"
    sleep 0.5
  done
  say "dockerd $(docker_cli version -f '{{.Server.Version}}') answers (pid $pid)"
}

cmd_stop() {
  local pid
  pid=$(cat "$dir/started-by-docker.sh" 2>/dev/null || true)
  if [[ -z "$pid" ]] || ! kill -0 "$pid" 2>/dev/null; then
    rm -f "$dir/started-by-docker.sh"
    say "no dockerd started by this script is running; nothing to stop"
    return 0
  fi
  say "stopping dockerd (pid $pid; it stops its containers first)"
  kill -TERM "$pid"
  local deadline=$((SECONDS + 60))
  while kill -0 "$pid" 2>/dev/null; do
    (( SECONDS < deadline )) || die "dockerd (pid $pid) still runs 60 s after SIGTERM; see $dir/dockerd.log"
    sleep 0.5
  done
  rm -f "$dir/started-by-docker.sh"
  say "dockerd stopped"
}

cmd_status() {
  local pid
  pid=$(cat "$dir/started-by-docker.sh" 2>/dev/null || true)
  if daemon_up; then
    say "daemon: up ($(docker_cli version -f '{{.Server.Version}}')$([[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && echo ", started by this script, pid $pid"))"
    docker_cli images --format '{{.Repository}}:{{.Tag}} {{.Size}} {{.CreatedSince}}' |
      grep -E '^(debian:bookworm|gradpress)' | sed 's/^/  image /' >&2 || true
  else
    say "daemon: not answering"
  fi
}

cmd_base() {
  daemon_up || die "no Docker daemon answers: run scripts/docker.sh start first"
  if docker_cli image inspect debian:bookworm >/dev/null 2>&1; then
    say "base image debian:bookworm present"
    return 0
  fi
  command -v mmdebstrap >/dev/null 2>&1 || apt_install mmdebstrap
  mkdir -p "$dir"
  if [[ ! -f "$dir/bookworm.tar" || ! -s "$dir/bookworm.tar" ]]; then
    rm -rf "$dir/bookworm.tar"
    say "making debian:bookworm with mmdebstrap --variant=apt from $mirror (about 1-3 minutes)"
    local suites="deb $mirror bookworm main
deb $mirror bookworm-updates main
deb ${mirror%/debian}/debian-security bookworm-security main"
    rm -rf "$dir/bookworm.part.tar"
    nice -n 10 mmdebstrap --quiet --format=tar --variant=apt bookworm "$dir/bookworm.part.tar" "$suites" ||
      die "mmdebstrap failed (is $mirror reachable?)"
    mv "$dir/bookworm.part.tar" "$dir/bookworm.tar"
  fi
  say "importing $dir/bookworm.tar as debian:bookworm"
  docker_cli import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' "$dir/bookworm.tar" debian:bookworm >/dev/null
}

# Images from an existing build tree's binaries: a small context of the binaries (copied
# under the build lock, stripped), configs/ and the entry scripts.
images_fast() {
  local build=$1 ctx=$dir/context
  local server=$build/server/gradpress-server worker=$build/worker/gradpress-worker sim=$build/sim/gradpress-sim
  [[ -x "$server" && -x "$worker" ]] ||
    die "no gradpress-server / gradpress-worker in $build (build them: cmake --build $build --target gradpress-server gradpress-worker; or use --full)"
  rm -rf "$ctx" && mkdir -p "$ctx/bin" "$ctx/docker"
  say "copying the binaries of $build${build_lock:+ (under the build lock $build_lock)} into $ctx"
  local files=("$server" "$worker")
  [[ -x "$sim" ]] && files+=("$sim")
  if [[ -n "$build_lock" ]]; then  # GP_BUILD_LOCK= (empty): a tree nobody rebuilds, no lock
    touch "$build_lock" 2>/dev/null || true
    flock -w 900 "$build_lock" cp "${files[@]}" "$ctx/bin/" || die "could not copy the binaries (build lock $build_lock held 15 min?)"
  else
    cp "${files[@]}" "$ctx/bin/"
  fi
  local staged=("$ctx/bin/gradpress-server" "$ctx/bin/gradpress-worker")
  [[ -x "$ctx/bin/gradpress-sim" ]] && staged+=("$ctx/bin/gradpress-sim")
  bash "$root/docker/stage.sh" "$ctx" "$root" "${staged[@]}"
  rm -rf "$ctx/bin"
  cp "$root/docker/Dockerfile.prebuilt" "$ctx/docker/"
  say "building gradpress-server (docker/Dockerfile.prebuilt, target server)"
  docker_cli build -q -f "$ctx/docker/Dockerfile.prebuilt" --target server -t gradpress-server "$ctx" >/dev/null
  say "building gradpress (docker/Dockerfile.prebuilt, target runtime)"
  docker_cli build -q -f "$ctx/docker/Dockerfile.prebuilt" --target runtime -t gradpress "$ctx" >/dev/null
}

images_full() {
  # GP_NICE: the compile inside the build stage runs under nice (the daemon, not this
  # script, is its parent).
  local nice_arg=(--build-arg "GP_NICE=${GRADPRESS_NICE:-10}")
  say "building gradpress-server from source (docker/Dockerfile, target server: scripts/setup.sh + a Release build; ~30+ min on 2 cores)"
  (cd "$root" && docker_cli build -f docker/Dockerfile --target server -t gradpress-server \
     "${nice_arg[@]}" .)
  say "building gradpress (docker/Dockerfile, target runtime; the build stage is cached)"
  (cd "$root" && docker_cli build -f docker/Dockerfile --target runtime -t gradpress \
     "${nice_arg[@]}" .)
}

cmd_images() {
  local full=0 build=$root/build
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --full) full=1; shift ;;
      --build-dir) build=$(cd "$2" 2>/dev/null && pwd) || die "no build directory '$2'"; shift 2 ;;
      *) die "images: unknown option '$1' (expected --full, --build-dir DIR)" ;;
    esac
  done
  daemon_up || die "no Docker daemon answers: run scripts/docker.sh start first"
  docker_cli image inspect debian:bookworm >/dev/null 2>&1 || die "no debian:bookworm image: run scripts/docker.sh base first"
  local t0=$SECONDS
  if (( full )); then images_full; else images_fast "$build"; fi
  say "images built in $((SECONDS - t0)) s:"
  docker_cli images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E '^gradpress' | sed 's/^/  /' >&2 || true
}

# Waits until every container of the compose service has exited; prints nothing.
wait_exited() {  # PROJECT SERVICE TIMEOUT_S
  local deadline=$((SECONDS + $3)) ids running
  while :; do
    ids=$(docker_cli ps -aq --filter "label=com.docker.compose.project=$1" --filter "label=com.docker.compose.service=$2")
    running=$(docker_cli inspect -f '{{.State.Status}}' $ids 2>/dev/null | grep -cvx exited || true)
    [[ -n "$ids" && "$running" -eq 0 ]] && return 0
    (( SECONDS < deadline )) || return 1
    sleep 2
  done
}

cmd_job() {
  local img_args=() shards=0 config=$root/configs/lenet_fmnist_m5.yaml sets=() timeout=${GRADPRESS_JOB_TIMEOUT:-3600}
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --full) img_args+=(--full); shift ;;
      --build-dir) img_args+=(--build-dir "$2"); shift 2 ;;
      --shards) shards=1; shift ;;
      --config) config=$(readlink -f "$2"); [[ -f "$config" ]] || die "no config file '$2'"; shift 2 ;;
      --set) sets+=("$2"); shift 2 ;;
      *) die "job: unknown option '$1' (expected --full, --build-dir DIR, --shards, --config FILE, --set K=V)" ;;
    esac
  done
  local started=0
  daemon_up || started=1
  cmd_start
  (( started )) && trap 'cmd_stop' EXIT
  cmd_base
  cmd_images "${img_args[@]}"
  # The job's config: the file plus --set lines, resolved by the worker binary in the image.
  local run_id job_dir
  run_id=job-$(date +%Y%m%d-%H%M%S)
  job_dir=$root/runs/docker/$run_id
  mkdir -p "$job_dir"
  cp "$config" "$job_dir/job.yaml"
  if [[ ${#sets[@]} -gt 0 ]]; then
    local set_args=()
    for s in "${sets[@]}"; do set_args+=(--set "$s"); done
    docker_cli run --rm --network none -v "$config:/c.yaml:ro" --entrypoint gradpress-worker gradpress \
      --config /c.yaml "${set_args[@]}" --print-config >"$job_dir/job.yaml" || die "the config does not resolve (above)"
  fi
  local files=(-f "$root/docker/docker-compose.yml")
  (( shards )) && files+=(-f "$root/docker/docker-compose.shards.yml")
  local compose=(docker-compose -p gradpress "${files[@]}")
  export WORLD_SIZE=2 RUN_ID=$run_id GRADPRESS_CONFIG_FILE=$job_dir/job.yaml
  say "compose job $run_id: ${compose[*]} up -d --scale worker=2"
  "${compose[@]}" up -d --no-build --scale worker=2 >&2
  say "waiting for both workers to finish (docker-compose -p gradpress logs -f worker to follow)"
  wait_exited gradpress worker "$timeout" || { "${compose[@]}" logs --tail 20 >&2; "${compose[@]}" down >&2; die "the workers did not finish in $timeout s"; }
  local bad
  bad=$(docker_cli inspect -f '{{.Name}} {{.State.ExitCode}}' $(docker_cli ps -aq --filter label=com.docker.compose.project=gradpress --filter label=com.docker.compose.service=worker) | awk '$2 != 0')
  say "workers done; stopping the server (SIGTERM: final checkpoint)"
  "${compose[@]}" stop >&2
  docker_cli run --rm --network none -v gradpress_runs:/runs --entrypoint tar gradpress-server -C "/runs/$run_id" -c . |
    tar -x -C "$job_dir"
  "${compose[@]}" down >&2
  [[ -z "$bad" ]] || die "a worker exited non-zero: $bad (logs in $job_dir)"
  say "done: $job_dir (summary.json, metrics.jsonl, logs, checkpoints)"
  python3 "$root/scripts/summary_table.py" "$job_dir" 2>/dev/null || cat "$job_dir/summary.json"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  base) cmd_base ;;
  images) shift; cmd_images "$@" ;;
  job) shift; cmd_job "$@" ;;
  -h|--help|help|"") sed -n '2,28p' "$0"; [[ -n "${1:-}" ]] ;;
  *) die "unknown command '$1' (start | base | images | job | stop | status; -h for help)" ;;
esac
