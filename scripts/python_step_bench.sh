#!/usr/bin/env bash
# The Python worker's step against the C++ worker's, same job, same machine, same run
# (docs/python.md): 2 gradpress-worker processes (LeNet-5) and then 2 Python processes of
# examples/torch_fashion_mnist.py (the same layers as a user-defined nn.Module), each pair
# against its own gradpress-server started from CONFIG, for STEPS steps on Fashion-MNIST with
# one intra-op thread per worker. Prints rank 0's summary.json means per step for each.
#
#   scripts/python_step_bench.sh [CONFIG] [STEPS]     # default configs/lenet_fmnist_m3.yaml 300
#   scripts/python_step_bench.sh CONFIG epochs=N      # whole epochs (the config's lr schedule),
#                                                     # and each runner's final test accuracy
#   WORKER_DATA=1 scripts/python_step_bench.sh CONFIG epochs=N   # the Python workers train on
#       gradpress-worker's batches (gp.worker_data) with the config's batch size, lr and
#       momentum (none locally under DGC's momentum correction, as gradpress-worker)
#
# step_ms: the C++ worker's Trainer::Step (the next batch is gathered on another thread);
# the Python worker's time from one step() to the next (its batch is sliced in the loop).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/launch.sh
config=${1:-configs/lenet_fmnist_m3.yaml}
steps=${2:-300}
build=${BUILD_DIR:-build}
[[ -x "$build/worker/gradpress-worker" && -f "$(ls "$build"/python/gradpress/_C*.so 2>/dev/null | head -1)" ]] ||
  { echo "python_step_bench: build gradpress-worker and gradpress._C first (cmake --build $build)" >&2; exit 2; }
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$out"' EXIT

run() {  # run NAME COMMAND...: a server, then the command for ranks 0 and 1 (RANK in env)
  local name=$1 dir=$out/$1 pids=() spid port
  shift
  mkdir -p "$dir"
  "$build/server/gradpress-server" --config "$config" --listen 127.0.0.1:0 --workers 2 \
    --log-level warn >"$dir/server.out" 2>&1 &
  spid=$!
  port=$(gp_server_port "$dir" "$spid")
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 GRADPRESS_SERVER=127.0.0.1:$port "$@" --run-dir "$dir" \
      >"$dir/worker-$r.log" 2>&1 &
    pids+=($!)
  done
  gp_wait_workers "$name" "$dir" "${pids[@]}" || exit 1
  gp_stop_server "$spid"
}

if [[ $steps == epochs=* ]]; then  # whole epochs: the config's schedule in both runners
  epochs=${steps#epochs=}
  schedule=$(/usr/bin/python3 -c "import sys, yaml; t = yaml.safe_load(open(sys.argv[1])).get('train', {}); print(t.get('lr_schedule', 'none'))" "$config")
  cpp_len=(--set "train.epochs=$epochs")
  py_len=(--epochs "$epochs" --lr-schedule "$schedule")
  if [[ ${WORKER_DATA:-0} == 1 ]]; then
    read -r batch lr momentum < <(/usr/bin/python3 -c "
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
t, k = c.get('train', {}), c.get('compress', {})
m = 0 if k.get('momentum_correction', 0) else t.get('momentum', 0.9)
print(t.get('batch_size', 64), t.get('lr', 0.01), m)" "$config")
    py_len+=(--worker-data --batch-size "$batch" --lr "$lr" --momentum "$momentum")
  fi
else
  cpp_len=(--max-steps "$steps")
  py_len=(--max-steps "$steps")
fi
run cpp "$build/worker/gradpress-worker" --config "$config" "${cpp_len[@]}" \
  --set train.threads=1 --set train.log_every=0
run python env PYTHONPATH="$build/python:python" /usr/bin/python3 examples/torch_fashion_mnist.py \
  --config "$config" "${py_len[@]}" --threads 1

printf "%-8s %6s %9s %10s %11s %12s %12s %8s\n" runner steps step_ms compute_ms exposed_ms \
  bytes_up/st bytes_dn/st test_acc
for name in cpp python; do
  /usr/bin/python3 - "$out/$name" "$name" <<'EOF'
import json, re, sys
d, name = sys.argv[1], sys.argv[2]
s = json.load(open(d + "/summary.json"))
acc = s.get("test_acc") or 0.0
if name == "python":  # the example's loop evaluates: its last epoch line, rank 0
    found = re.findall(r"worker 0 epoch \d+ loss \S+ test_acc (\S+)", open(d + "/worker-0.log").read())
    acc = float(found[-1]) if found else 0.0
print(f"{name:<8} {s['steps']:6d} {s['step_ms']:9.2f} {s['compute_ms']:10.2f} "
      f"{s['exposed_comm_ms']:11.2f} {s['bytes_up_per_step']:12.0f} "
      f"{s['bytes_down_per_step']:12.0f} {acc:8.4f}")
EOF
done
if [[ ${WORKER_DATA:-0} == 1 ]]; then  # the same batches: are the two runs one run?
  /usr/bin/python3 - "$out" <<'EOF'
import json, sys
def rows(name):
    steps = {}
    for line in open(f"{sys.argv[1]}/{name}/metrics.jsonl"):
        x = json.loads(line)
        if x.get("rank") == 0 and "bytes_up" in x and "epoch_s" not in x:
            steps[x["step"]] = (x["bytes_up"], x["bytes_down"])
    return steps
cpp, py = rows("cpp"), rows("python")
same = sum(1 for s in cpp if py.get(s) == cpp[s])
print(f"rank 0's steps with the same bytes up and down in both runs: {same} of {len(cpp)}")
EOF
fi
