#!/usr/bin/env bash
# scripts/compare.sh for real, two tiny runs on a 100 Mbit/s star: DDP with torch's
# fp16_compress_hook and gradpress with fp16 both ways. Each leaves a row in results.jsonl
# whose bytes per step come from the worker's interface counters (at least the model in fp16
# each way: 75,002 ResNet-8 parameters) and a step time; the table names both. Without root /
# CAP_NET_ADMIN it says so and exits 77 (ctest reports it skipped).
#
#   tests/netem/compare_test.sh REPO_ROOT BUILD_DIR
set -euo pipefail
repo=$1
build=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if ! ip netns add "gpc-test-$$" 2>/dev/null; then
  echo "compare_test: SKIPPED: cannot create network namespaces here (needs root or CAP_NET_ADMIN)"
  exit 77
fi
ip netns del "gpc-test-$$"
BUILD_DIR=$build bash "$repo/scripts/compare.sh" --rates 100mbit --workers 2 \
  --methods "ddp-fp16 gp-fp16" --steps 6 --eval-every 3 --out "$out" 2>&1 | tail -n 20
/usr/bin/python3 - "$out" <<'PY'
import json, sys
d = sys.argv[1]
rows = {r["label"]: r for r in map(json.loads, open(d + "/results.jsonl"))}
assert set(rows) == {"ddp-fp16", "gp-fp16"}, f"runs: {sorted(rows)}"
fp16_model = 75002 * 2
for label, r in rows.items():
    assert r["steps"] == 6 and r["workers"] == 2 and r["rate"] == "100mbit", r
    assert r["median_step_ms"] > 0, r
    # every step sends and receives the model in fp16 (the ring's two halves, or the push
    # and the pull), plus headers: measured on the link, not computed
    assert fp16_model <= r["tx_per_step"] < 3 * fp16_model, (label, r["tx_per_step"])
    assert fp16_model <= r["rx_per_step"] < 3 * fp16_model, (label, r["rx_per_step"])
    assert r["final_acc"] is not None and len(r["evals"]) == 2, r
table = open(d + "/table.txt").read()
assert "ddp-fp16" in table and "gp-fp16" in table, table
print("compare_test: ok:", {k: (v["median_step_ms"], v["tx_per_step"]) for k, v in rows.items()})
PY
