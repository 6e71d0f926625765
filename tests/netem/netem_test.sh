#!/usr/bin/env bash
# scripts/netem.sh for real: namespaces and veth links come up, tc tbf really caps each
# direction at the rate (a timed transfer), the star topology makes two workers share the
# server's one link while separate links do not, the fault proxy really delays and resets, a short
# server + worker run trains through it, and every namespace is gone afterwards, also after a
# failing command and after a command that leaves a process behind in a namespace.
# Without root / CAP_NET_ADMIN it says so loudly and exits 77 (ctest reports it skipped).
#
#   tests/netem/netem_test.sh REPO_ROOT BUILD_DIR
set -euo pipefail
repo=$1
build=$2
netem=$repo/scripts/netem.sh
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

if ! ip netns add "gpn-test-$$" 2>/dev/null; then
  echo "=================================================================="
  echo "netem_test: SKIPPED: cannot create network namespaces here (needs root or"
  echo "CAP_NET_ADMIN/CAP_SYS_ADMIN); the slow-link script was NOT tested"
  echo "=================================================================="
  exit 77
fi
ip netns del "gpn-test-$$"
command -v tc >/dev/null || { echo "netem_test: tc missing (iproute2)"; exit 1; }

fail() { echo "netem_test: FAIL: $*"; exit 1; }
gone() {  # every namespace named in file $1 is gone
  local ns
  [[ -s "$1" ]] || fail "no namespaces recorded in $1"
  for ns in $(cat "$1"); do
    ip netns list | awk '{print $1}' | grep -qx "$ns" && fail "namespace $ns still exists"
  done
  return 0
}

# A receiver that counts bytes until EOF and prints them with the monotonic times of the first
# and the last byte (one clock for every namespace, so concurrent transfers add up), and a
# sender of N bytes (run inside the namespaces).
cat >"$out/recv.py" <<'PY'
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)
open(sys.argv[3], "w").write("ready\n")
c, _ = s.accept(); n = 0; t0 = None
while True:
    d = c.recv(1 << 16)
    if not d: break
    if t0 is None: t0 = time.monotonic()
    n += len(d)
print(f"{n} {t0:.6f} {time.monotonic():.6f}")
PY
cat >"$out/send.py" <<'PY'
import os, socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
if len(sys.argv) > 5:  # connected: say so (argv[4]), then start when argv[5] exists
    open(sys.argv[4], "w").write("ready\n")
    while not os.path.exists(sys.argv[5]): time.sleep(0.001)
buf = b"x" * (1 << 16); left = int(sys.argv[3])
while left > 0:
    c.sendall(buf[:min(left, len(buf))]); left -= min(left, len(buf))
c.close()
PY
cat >"$out/echo.py" <<'PY'
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(4)
open(sys.argv[3], "w").write("ready\n")
while True:
    c, _ = s.accept()
    try:
        while True:
            d = c.recv(4096)
            if not d: break
            c.sendall(d)
    except OSError:
        pass
    c.close()
PY
cat >"$out/ping.py" <<'PY'
import socket, sys, time
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rtts = []
try:
    for _ in range(5):
        t = time.monotonic(); c.sendall(b"ping")
        if c.recv(16) == b"": print("closed"); sys.exit(0)
        rtts.append((time.monotonic() - t) * 1000)
except ConnectionResetError:
    print("reset"); sys.exit(0)
except socket.timeout:
    print("timeout"); sys.exit(0)
print("rtt_ms %.1f" % min(rtts))
PY

# 1. The cap, both directions, at 50 Mbit/s: 6 MB each way (about 1 s each).
cat >"$out/cap.sh" <<'SH'
set -euo pipefail
echo $NETEM_SERVER_NS $NETEM_WORKER_NS >"$OUTDIR/ns"
sip=${NETEM_SERVER_IPS%% *}; wip=${NETEM_WORKER_IPS%% *}; wns=${NETEM_WORKER_NS%% *}
ip netns exec "$NETEM_SERVER_NS" tc qdisc show | grep -q "tbf.*rate 50Mbit" || { echo "no tbf on the server end"; exit 1; }
ip netns exec "$wns" tc qdisc show | grep -q "tbf.*rate 50Mbit" || { echo "no tbf on the worker end"; exit 1; }
rm -f "$OUTDIR/ready"
ip netns exec "$NETEM_SERVER_NS" python3 "$OUTDIR/recv.py" "$sip" 9000 "$OUTDIR/ready" >"$OUTDIR/up" &
for _ in $(seq 50); do [[ -f "$OUTDIR/ready" ]] && break; sleep 0.1; done
ip netns exec "$wns" python3 "$OUTDIR/send.py" "$sip" 9000 6000000
wait
rm -f "$OUTDIR/ready"
ip netns exec "$wns" python3 "$OUTDIR/recv.py" "$wip" 9001 "$OUTDIR/ready" >"$OUTDIR/down" &
for _ in $(seq 50); do [[ -f "$OUTDIR/ready" ]] && break; sleep 0.1; done
ip netns exec "$NETEM_SERVER_NS" python3 "$OUTDIR/send.py" "$wip" 9001 6000000
wait
SH
OUTDIR=$out bash "$netem" --rate 50mbit --workers 1 -- bash "$out/cap.sh" || fail "cap run failed"
gone "$out/ns"
for dir in up down; do
  read -r n t0 t1 <"$out/$dir"
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
  mbit=$(awk -v n="$n" -v s="$secs" 'BEGIN { printf "%.1f", n * 8 / s / 1e6 }')
  echo "netem_test: $dir: $n bytes in $secs s = $mbit Mbit/s through a 50mbit link"
  awk -v m="$mbit" 'BEGIN { exit !(m > 35 && m < 55) }' || fail "$dir rate $mbit Mbit/s is not about 50"
done

# 1b. Two workers push 4 MB each to the server at once, 50 Mbit/s links. Star: they share
#     the server's link (together about 50 Mbit/s); links: each has its own (about 100).
cat >"$out/share.sh" <<'SH'
set -euo pipefail
read -r s0 s1 <<<"$NETEM_SERVER_IPS"  # the server's address on each worker's link
read -r w0 w1 <<<"$NETEM_WORKER_NS"
echo $NETEM_SERVER_NS $NETEM_WORKER_NS >>"$OUTDIR/ns1b"
rm -f "$OUTDIR/r0" "$OUTDIR/r1"
ip netns exec "$NETEM_SERVER_NS" python3 "$OUTDIR/recv.py" 0.0.0.0 9010 "$OUTDIR/r0" >"$OUTDIR/$NETEM_TOPOLOGY.0" &
ip netns exec "$NETEM_SERVER_NS" python3 "$OUTDIR/recv.py" 0.0.0.0 9011 "$OUTDIR/r1" >"$OUTDIR/$NETEM_TOPOLOGY.1" &
for _ in $(seq 50); do [[ -f "$OUTDIR/r0" && -f "$OUTDIR/r1" ]] && break; sleep 0.1; done
# Both senders connect first and start together, so the transfers overlap whole (a sender's
# late start under load would leave the link idle and lower the sum).
rm -f "$OUTDIR/s0" "$OUTDIR/s1" "$OUTDIR/go"
ip netns exec "$w0" python3 "$OUTDIR/send.py" "$s0" 9010 4000000 "$OUTDIR/s0" "$OUTDIR/go" &
ip netns exec "$w1" python3 "$OUTDIR/send.py" "$s1" 9011 4000000 "$OUTDIR/s1" "$OUTDIR/go" &
for _ in $(seq 100); do [[ -f "$OUTDIR/s0" && -f "$OUTDIR/s1" ]] && break; sleep 0.1; done
touch "$OUTDIR/go"
wait
SH
for topo in star links; do
  OUTDIR=$out bash "$netem" --topology "$topo" --rate 50mbit --workers 2 -- bash "$out/share.sh" \
    || fail "$topo share run failed"
  together=$(cat "$out/$topo.0" "$out/$topo.1" |
    awk '{ n += $1; if (NR == 1 || $2 < a) a = $2; if ($3 > b) b = $3 } END { printf "%.1f", n * 8 / (b - a) / 1e6 }')
  echo "netem_test: $topo: two workers pushing at once: $together Mbit/s together (links of 50mbit)"
  eval "${topo}_mbit=$together"
done
gone "$out/ns1b"
awk -v m="$star_mbit" 'BEGIN { exit !(m > 35 && m < 58) }' || fail "star: $star_mbit Mbit/s together, expected about 50 (one shared server link)"
awk -v m="$links_mbit" 'BEGIN { exit !(m > 75) }' || fail "links: $links_mbit Mbit/s together, expected about 100 (a link each)"
grep -q "topology: star" <(bash "$netem" --topology star --rate 1gbit --workers 1 -- bash -c 'echo topology: $NETEM_TOPOLOGY') \
  || fail "NETEM_TOPOLOGY not set"
rc=0
bash "$netem" --topology ring --workers 1 -- true >/dev/null 2>&1 || rc=$?
[[ $rc -eq 2 ]] || fail "--topology ring: exit $rc, expected 2"

# 2. The fault proxy: 100 ms each way -> a round trip of about 200 ms; reset probability 1
#    -> the connection is reset.
cat >"$out/fault.sh" <<'SH'
set -euo pipefail
sip=${NETEM_SERVER_IPS%% *}; wns=${NETEM_WORKER_NS%% *}
echo $NETEM_SERVER_NS $NETEM_WORKER_NS >"$OUTDIR/ns2"
ip netns exec "$NETEM_SERVER_NS" python3 "$OUTDIR/echo.py" "$sip" 9002 "$OUTDIR/ready2" &
for _ in $(seq 50); do [[ -f "$OUTDIR/ready2" ]] && break; sleep 0.1; done
ip netns exec "$wns" python3 "$REPO/scripts/faultproxy.py" --listen 127.0.0.1:9100 \
  --connect "$sip:9002" --delay-ms 100 2>/dev/null &
ip netns exec "$wns" python3 "$REPO/scripts/faultproxy.py" --listen 127.0.0.1:9101 \
  --connect "$sip:9002" --reset-prob 1 2>/dev/null &
for _ in $(seq 100); do  # until both proxies listen
  ports=$(ip netns exec "$wns" ss -Hltn 2>/dev/null || true)
  grep -q '127.0.0.1:9100 ' <<<"$ports" && grep -q '127.0.0.1:9101 ' <<<"$ports" && break
  sleep 0.1
done
ip netns exec "$wns" python3 "$OUTDIR/ping.py" 9100 >"$OUTDIR/delay"
ip netns exec "$wns" python3 "$OUTDIR/ping.py" 9101 >"$OUTDIR/reset"
# the echo server and the proxies are left running: netem.sh must stop them
SH
OUTDIR=$out REPO=$repo bash "$netem" --rate 1gbit --workers 1 -- bash "$out/fault.sh" || fail "fault run failed"
gone "$out/ns2"
echo "netem_test: delay 100 ms each way: $(cat "$out/delay"); reset-prob 1: $(cat "$out/reset")"
rtt=$(awk '{print $2}' "$out/delay")
awk -v r="$rtt" 'BEGIN { exit !(r >= 195 && r < 300) }' || fail "round trip '$rtt' ms, expected about 200"
grep -qx "reset" "$out/reset" || fail "no reset: $(cat "$out/reset")"

# 3. A failing command, with a process left behind in a namespace: exit status passed on,
#    the process stopped, the namespaces gone.
rc=0
bash "$netem" --rate 100mbit --workers 2 -- bash -c \
  'echo $NETEM_SERVER_NS $NETEM_WORKER_NS >'"$out/ns3"'; ip netns exec $NETEM_SERVER_NS sleep 300 & p=$!; echo $p >'"$out/sleeper"'; for _ in $(seq 100); do ip netns pids $NETEM_SERVER_NS | grep -qx $p && break; sleep 0.05; done; exit 3' \
  >"$out/log3" 2>&1 || rc=$?
[[ $rc -eq 3 ]] || { cat "$out/log3"; fail "failing command: exit $rc, expected 3"; }
gone "$out/ns3"
sleeper=$(cat "$out/sleeper")
for _ in $(seq 30); do  # stopped: gone, or a zombie not yet reaped by its new parent
  [[ ! -e /proc/$sleeper ]] || [[ "$(awk '{print $3}' "/proc/$sleeper/stat" 2>/dev/null)" == Z ]] && break
  sleep 0.1
done
[[ -e /proc/$sleeper && "$(awk '{print $3}' "/proc/$sleeper/stat" 2>/dev/null)" != Z ]] &&
  fail "process $sleeper left in a namespace still runs"

# 4. Something trivial succeeds and cleans up.
bash "$netem" --rate 1gbit --workers 3 -- bash -c 'echo $NETEM_SERVER_NS $NETEM_WORKER_NS >'"$out/ns4" \
  || fail "trivial command failed"
gone "$out/ns4"

# 5. Server + 2 workers, LeNet method 5 on synthetic data, 3 steps, through the fault proxy
#    (5 ms each way); then a worker that fails (a bad --set) must not leave namespaces.
cp "$repo/configs/lenet_fmnist_m5.yaml" "$out/m5.yaml"
sed -i 's/^name:.*/name: netem-test/' "$out/m5.yaml"
before=$(ip netns list | awk '/^gpn-/ {print $1}' | sort)
(cd "$out" && NETEM_NO_BUILD=1 BUILD_DIR=$build bash "$netem" --rate 100mbit --delay-ms 5 \
   --max-steps 3 --runs-file "$out/runs" --runs-root "$out/r" "$out/m5.yaml" --set dataset.name=synthetic >"$out/log5" 2>&1) || { tail -n 30 "$out/log5"; fail "training run failed"; }
run=$(cat "$out/runs")
[[ -f "$run/summary.json" ]] || fail "no summary.json in $run"
grep -q "netem-test" "$out/log5" || fail "no table"
cat "$run/link.txt" | grep -q "rate: 100mbit" || fail "no link.txt"
grep -q "forwarded" "$run/faultproxy-0.log" || fail "fault proxy not used: $(cat "$run/faultproxy-0.log")"
echo "netem_test: training run: $(tail -n 2 "$out/log5" | head -n 1)"
rc=0
NETEM_NO_BUILD=1 BUILD_DIR=$build bash "$netem" --rate 100mbit --max-steps 3 --runs-root "$out/r" "$out/m5.yaml" \
  --set dataset.name=synthetic --set dataset.name=nosuch >"$out/log6" 2>&1 || rc=$?
[[ $rc -ne 0 ]] || fail "a run with a bad dataset passed"
after=$(ip netns list | awk '/^gpn-/ {print $1}' | sort)
leaked=$(comm -13 <(echo "$before") <(echo "$after"))
[[ -z "$leaked" ]] || fail "namespaces left after a failed run: $leaked"
echo "netem_test: ok"
