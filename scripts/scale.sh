#!/usr/bin/env bash
# The scaling curve: synthetic workers (gradpress-bench scale-worker: the real client and
# codecs, random gradients, no training compute) against S gradpress-server shards, every host
# in the star topology of scripts/netem.sh (one capped link per host behind a switch, so the
# workers share each server's link), for W workers x S shards x codecs.
#
#   scripts/scale.sh                                   # W 1 2 4 8, S 1 2 4, none + method 5
#   scripts/scale.sh --json --workers "1 8" --servers "1 4" --rate 200mbit --numel 2097152
#
# Options: --workers "..." --servers "..." --codecs "none;topk then=qsgd levels=16 ..."
# (';'-separated specs, default none and method 5's topk 1% + qsgd 16 with error feedback),
# --rate R (tc rate of every link, default 200mbit), --numel N (model floats, default 2097152
# = 8.4 MB), --steps K (5), --out DIR (default runs/scale/<timestamp>), --json (the points on
# stdout, one object per line). Writes DIR/points.jsonl and DIR/scale.png (gnuplot: step time
# against workers, a line per S and codec). Each point: workers, servers, codec, rate_mbit,
# model_mb, step_ms (the slowest worker's median of its one PushPull a step), wait_ms (its
# barrier wait on the server), network_ms (the rest of the call but the server's work),
# server_cpu_ms (the shards' user + system CPU per measured step, summed; registration, the
# initial weights and the warm-up step are left out), imbalance (largest shard's
# bytes / mean, transport/placement.h). Needs root (network namespaces) like netem.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

workers_list="1 2 4 8"
servers_list="1 2 4"
codecs="none;topk ratio=0.01 error_feedback=true then=qsgd levels=16"
rate=200mbit
numel=2097152
steps=5
out=""
json=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --workers) workers_list=$2; shift 2 ;;
    --servers) servers_list=$2; shift 2 ;;
    --codecs) codecs=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --numel) numel=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --json) json=1; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "scale.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for v in $workers_list $servers_list $numel $steps; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "scale.sh: '$v' is not a positive integer" >&2; exit 2; }
done
BUILD_DIR=${BUILD_DIR:-build}
bench=$BUILD_DIR/bench/gradpress-bench
server=$BUILD_DIR/server/gradpress-server
[[ -x "$bench" && -x "$server" ]] || { echo "scale.sh: build gradpress-bench and gradpress-server first ($BUILD_DIR)" >&2; exit 1; }
out=${out:-runs/scale/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
: >"$out/points.jsonl"
rate_mbit=$(awk -v r="$rate" 'BEGIN { n = r + 0; u = tolower(substr(r, length(n "") + 1));
  print (u == "gbit") ? n * 1000 : (u == "mbit") ? n : (u == "kbit") ? n / 1000 : n / 1e6 }')

# One point, run inside netem.sh's namespaces (NETEM_* set): S servers, W workers.
cat >"$out/point.sh" <<'SH'
set -euo pipefail
read -r -a sns <<<"$NETEM_SHARD_NS"; read -r -a sips <<<"$NETEM_SHARD_IPS"
read -r -a wns <<<"$NETEM_WORKER_NS"
S=${#sns[@]}; W=${#wns[@]}
pids=(); addrs=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
for ((s = 0; s < S; s++)); do
  rm -f "$DIR/port-$s"
  ip netns exec "${sns[$s]}" "$SERVER" --listen 0.0.0.0:0 --workers "$W" --shard "$s" --shards "$S" \
    --port-file "$DIR/port-$s" --log-level warn --set "pull=$PULL" --set compress.min_numel=0 \
    --set server.worker_timeout_s=900 --set server.deadline_s=900 >"$DIR/server-$s.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 300); do [[ -s "$DIR/port-$s" ]] && break; sleep 0.1; done
  [[ -s "$DIR/port-$s" ]] || { cat "$DIR/server-$s.log" >&2; exit 1; }
  addrs+=("${sips[$s]}:$(cat "$DIR/port-$s")")
done
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }  # user + system, clock ticks
rm -f "$DIR"/ready-* "$DIR/go"
wpids=()
for ((r = 0; r < W; r++)); do
  ip netns exec "${wns[$r]}" "$BENCH" scale-worker --servers "$(IFS=,; echo "${addrs[*]}")" \
    --rank "$r" --workers "$W" --numel "$NUMEL" --codec "$CODEC" --steps "$STEPS" \
    --ready-file "$DIR/ready-$r" --go-file "$DIR/go" \
    >"$DIR/worker-$r.json" 2>"$DIR/worker-$r.log" &
  wpids+=($!)
done
# The servers' CPU is read once every worker is past registration, the initial weights and
# its warm-up step, and waits at the go file: the measured steps only.
for _ in $(seq 6000); do
  n=$(find "$DIR" -maxdepth 1 -name "ready-*" | wc -l)
  [[ $n -eq $W ]] && break
  for p in "${wpids[@]}"; do kill -0 "$p" 2>/dev/null || { cat "$DIR"/worker-*.log >&2; exit 1; }; done
  sleep 0.1
done
[[ $n -eq $W ]] || { echo "scale.sh: the workers did not finish their warm-up" >&2; exit 1; }
before=(); for ((s = 0; s < S; s++)); do before+=("$(cpu "${pids[$s]}")"); done
touch "$DIR/go"
for p in "${wpids[@]}"; do wait "$p" || { echo "scale.sh: a worker failed:" >&2; cat "$DIR"/worker-*.log >&2; exit 1; }; done
ticks=0; for ((s = 0; s < S; s++)); do ticks=$((ticks + $(cpu "${pids[$s]}") - ${before[$s]})); done
echo "$ticks" >"$DIR/server_ticks"
SH

IFS=';' read -r -a codec_list <<<"$codecs"
for codec in "${codec_list[@]}"; do
  pull=$("$bench" scale-worker --codec "$codec" --print-codec) || exit 2  # the same block
  for S in $servers_list; do
    for W in $workers_list; do
      dir=$out/points/$(echo "$codec" | tr -c 'a-z0-9.=' '_')-s$S-w$W
      mkdir -p "$dir"
      DIR=$dir SERVER=$server BENCH=$bench PULL=$pull CODEC=$codec NUMEL=$numel STEPS=$steps \
        bash scripts/netem.sh --topology star --rate "$rate" --workers "$W" --servers "$S" -- \
        bash "$out/point.sh" >"$dir/netem.log" 2>&1 || { cat "$dir/netem.log" >&2; exit 1; }
      python3 - "$dir" "$W" "$S" "$codec" "$rate_mbit" "$steps" "$(getconf CLK_TCK)" >>"$out/points.jsonl" <<'PY'
import json, sys, glob
d, W, S, codec, rate, steps, tck = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], float(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
rows = [json.loads(open(f).read()) for f in sorted(glob.glob(d + "/worker-*.json"))]
slow = max(rows, key=lambda r: r["step_ms"])
ticks = int(open(d + "/server_ticks").read())
print(json.dumps({"workers": W, "servers": S, "codec": codec, "rate_mbit": rate,
                  "model_mb": slow["model_mb"], "step_ms": slow["step_ms"],
                  "wait_ms": slow["wait_ms"], "network_ms": slow["network_ms"],
                  "server_cpu_ms": ticks * 1000.0 / tck / steps,
                  "imbalance": slow["imbalance"]}))
PY
      [[ $json -eq 1 ]] && tail -n 1 "$out/points.jsonl"
      [[ $json -eq 1 ]] || echo "scale.sh: $(tail -n 1 "$out/points.jsonl")" >&2
    done
  done
done

# The plot: step ms against workers, one line per (codec, S).
if command -v gnuplot >/dev/null; then
  python3 - "$out" <<'PY'
import json, sys, collections
out = sys.argv[1]
lines = collections.OrderedDict()
for l in open(out + "/points.jsonl"):
    p = json.loads(l)
    lines.setdefault((p["codec"].split()[0], p["servers"]), []).append((p["workers"], p["step_ms"]))
plots = []
for i, ((codec, s), pts) in enumerate(lines.items()):
    with open(f"{out}/line{i}.dat", "w") as f:
        for w, ms in sorted(pts): f.write(f"{w} {ms}\n")
    plots.append(f'"{out}/line{i}.dat" using 1:2 with linespoints title "{codec}, S={s}"')
open(out + "/scale.gp", "w").write(
    f'set terminal png size 900,600\nset output "{out}/scale.png"\n'
    'set xlabel "workers"\nset ylabel "step ms"\nset logscale y\nset key top left\n'
    'set title "gradpress: step time against workers (star topology)"\n'
    "plot " + ", ".join(plots) + "\n")
PY
  gnuplot "$out/scale.gp" && echo "scale.sh: $out/scale.png" >&2
fi
echo "scale.sh: points in $out/points.jsonl" >&2
