#!/usr/bin/env bash
# gradpress-server as a daemon: serves Prometheus text, exits 0 on SIGTERM, and exits 2
# with a clear message on a bad config or an address it cannot bind.
set -euo pipefail
server=$1
config=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

"$server" --config "$config" --listen 127.0.0.1:0 --set server.metrics_port=0 >"$out/log" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q "listening on port" "$out/log" && break; sleep 0.1; done
grep -q "listening on port" "$out/log" || { cat "$out/log"; echo "server did not start"; exit 1; }
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
[[ $rc -eq 0 ]] || { cat "$out/log"; echo "SIGTERM exit code $rc, expected 0"; exit 1; }
grep -q "stopping" "$out/log" || { echo "no stop message"; exit 1; }

# Metrics endpoint on a free port.
port=$(( (RANDOM % 20000) + 30000 ))
"$server" --listen 127.0.0.1:0 --set server.metrics_port=$port >"$out/log2" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q "Prometheus metrics" "$out/log2" && break; sleep 0.1; done
exec 3<>/dev/tcp/127.0.0.1/$port
printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3
body=$(cat <&3)
exec 3<&-
kill -TERM "$pid"; wait "$pid"
grep -q "gradpress_steps_total 0" <<<"$body" || { echo "metrics body: $body"; exit 1; }

rc=0; "$server" --set train.lrr=1 >"$out/bad" 2>&1 || rc=$?
[[ $rc -eq 2 ]] && grep -q "did you mean 'train.lr'" "$out/bad" || { cat "$out/bad"; exit 1; }
rc=0; "$server" --listen 999.1.1.1:5 >"$out/bad" 2>&1 || rc=$?
[[ $rc -eq 2 ]] && grep -q "cannot listen on '999.1.1.1:5'" "$out/bad" || { cat "$out/bad"; exit 1; }
echo "daemon_test: ok"
