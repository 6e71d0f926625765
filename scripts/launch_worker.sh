#!/usr/bin/env bash
# gradpress-worker under a restarting launcher (torchrun / torchelastic, Kubernetes, compose).
#
#   TORCHELASTIC_RESTART_COUNT=1 scripts/launch_worker.sh --config C --run-dir D
#
# Identity comes from the environment the launcher sets: RANK and WORLD_SIZE (or --rank /
# --workers), the server from GRADPRESS_SERVER or --server only. MASTER_ADDR / MASTER_PORT are
# ignored on purpose: torchrun rewrites them on a restart, and they name the rendezvous, not
# the parameter server.
# A restart count above 0 (TORCHELASTIC_RESTART_COUNT, else GRADPRESS_RESTART_COUNT) adds
# `--resume auto --incarnation <count+1>`: the worker continues from the checkpoint of the
# server's step, and the server accepts it as a new incarnation of the same rank.
# The binary: $GRADPRESS_WORKER_BIN, else $BUILD_DIR/worker/gradpress-worker (default build/),
# else gradpress-worker on PATH. Everything else is passed through, then exec'd.
set -euo pipefail

bin=${GRADPRESS_WORKER_BIN:-}
if [[ -z "$bin" ]]; then
  root=$(cd "$(dirname "$0")/.." && pwd)
  build=${BUILD_DIR:-build}
  [[ "$build" = /* ]] || build=$root/$build
  if [[ -x "$build/worker/gradpress-worker" ]]; then bin=$build/worker/gradpress-worker
  else bin=$(command -v gradpress-worker || true); fi
fi
[[ -n "$bin" && -x "$bin" ]] || { echo "launch_worker.sh: no gradpress-worker binary (set GRADPRESS_WORKER_BIN or BUILD_DIR)" >&2; exit 2; }

count=${TORCHELASTIC_RESTART_COUNT:-${GRADPRESS_RESTART_COUNT:-0}}
[[ "$count" =~ ^[0-9]+$ ]] || { echo "launch_worker.sh: restart count '$count' is not a number" >&2; exit 2; }

extra=()
if (( count > 0 )); then
  has_resume=0; has_inc=0
  for a in "$@"; do
    case "$a" in --resume|--resume=*) has_resume=1 ;; --incarnation|--incarnation=*) has_inc=1 ;; esac
  done
  (( has_resume )) || extra+=(--resume auto)
  (( has_inc )) || extra+=(--incarnation $((count + 1)))
  echo "launch_worker.sh: restart $count: ${extra[*]}" >&2
fi
exec "$bin" "$@" "${extra[@]}"
