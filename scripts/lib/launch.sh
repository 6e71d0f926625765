# The launch-and-wait routine of a local job, shared by scripts/run.sh and scripts/netem.sh
# (source it; bash). Each caller starts the processes its own way (netem.sh inside network
# namespaces) and hands the pids here.
#
#   gp_server_port RUN_DIR SERVER_PID [OUT] -> the port the server says it listens on (in
#                                            RUN_DIR/OUT, default server.out)
#   gp_follow RUN_DIR WORKER0_PID         -> worker 0's newest progress line, while it runs
#   gp_wait_workers WHO RUN_DIR PID...    -> waits for every worker; status 1 if one failed
#   gp_stop_server SERVER_PID             -> SIGTERM (final checkpoint), then waits

# Waits up to 30 s for "listening on port N" in RUN_DIR/server.out (or OUT); status 1 (with
# the server's output on stderr) if the server exits or never says it.
gp_server_port() {
  local run_dir=$1 pid=$2 out=${3:-server.out} port=""
  for _ in $(seq 300); do
    port=$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$run_dir/$out" | head -1)
    [[ -n "$port" ]] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ -z "$port" ]]; then
    cat "$run_dir/$out" >&2
    return 1
  fi
  echo "$port"
}

# Prints (stderr) worker 0's newest "epoch"/"step" log line every 2 s while PID runs.
gp_follow() {
  local run_dir=$1 pid=$2 last="" line
  while kill -0 "$pid" 2>/dev/null; do
    line=$(grep -E "epoch|step" "$run_dir/worker-0.log" 2>/dev/null | tail -n 1 || true)
    [[ -n "$line" && "$line" != "$last" ]] && echo "  $line" >&2 && last=$line
    sleep 2
  done
}

# Waits for the workers (rank order); a failed one is reported with its log's last lines.
gp_wait_workers() {
  local who=$1 run_dir=$2 failed=0 r=0 rc
  shift 2
  for pid in "$@"; do
    rc=0
    wait "$pid" || rc=$?
    if [[ $rc -ne 0 ]]; then
      failed=1
      echo "$who: worker $r exited $rc; last lines of $run_dir/worker-$r.log:" >&2
      tail -n 5 "$run_dir/worker-$r.log" >&2
    fi
    r=$((r + 1))
  done
  return $failed
}

gp_stop_server() {
  kill -TERM "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
